import Foundation

/// An error from verifying Apple's data or talking to Apple's servers, with a code and
/// whether trying again later can succeed.
public struct AppStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong. Open-ended: new codes may be added.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// Not a JWS, not base64, not a receipt, or JSON of the wrong shape.
        public static let invalidFormat = Code(rawValue: "invalidFormat")
        /// The JWS header names an algorithm other than ES256.
        public static let unsupportedAlgorithm = Code(rawValue: "unsupportedAlgorithm")
        /// The certificates do not chain to a trusted root, or lack Apple's markers.
        public static let invalidCertificateChain = Code(rawValue: "invalidCertificateChain")
        /// A certificate in the chain was not valid at the verification time.
        public static let certificateExpired = Code(rawValue: "certificateExpired")
        /// OCSP says a certificate of the chain is revoked.
        public static let certificateRevoked = Code(rawValue: "certificateRevoked")
        /// The signature does not match the signed bytes.
        public static let invalidSignature = Code(rawValue: "invalidSignature")
        /// The bundle id or app Apple id is not the configured one.
        public static let invalidAppIdentifier = Code(rawValue: "invalidAppIdentifier")
        /// The data is from an environment this verifier does not accept.
        public static let invalidEnvironment = Code(rawValue: "invalidEnvironment")
        /// A revocation check could not be completed (retryable).
        public static let revocationCheckFailed = Code(rawValue: "revocationCheckFailed")
        /// Apple's server could not be reached, or answered in a way that may change later.
        public static let serverUnavailable = Code(rawValue: "serverUnavailable")
        /// Apple's server asked us to slow down.
        public static let rateLimited = Code(rawValue: "rateLimited")
        /// Apple's server refused the request (see `apiErrorCode` / `status`).
        public static let requestRejected = Code(rawValue: "requestRejected")
        /// The client is configured wrongly (a bad key, a missing shared secret).
        public static let invalidConfiguration = Code(rawValue: "invalidConfiguration")

        public var description: String { rawValue }
    }

    public let code: Code
    /// A sentence for people; never contains the data being verified.
    public let message: String
    /// Whether the same request can succeed later.
    public let isRetryable: Bool
    /// The HTTP status, for errors from Apple's servers.
    public var httpStatus: Int?
    /// The App Store Server API `errorCode`, or the verifyReceipt `status`.
    public var apiErrorCode: Int?
    /// When Apple asked to be called again (429 `Retry-After`).
    public var retryAfter: Date?

    public init(
        _ code: Code, _ message: String, retryable: Bool = false, httpStatus: Int? = nil, apiErrorCode: Int? = nil,
        retryAfter: Date? = nil
    ) {
        self.code = code
        self.message = message
        self.isRetryable = retryable
        self.httpStatus = httpStatus
        self.apiErrorCode = apiErrorCode
        self.retryAfter = retryAfter
    }

    public var description: String { "\(code): \(message)" }
}
