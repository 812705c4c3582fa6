import Crypto
import Foundation
import X509

/// Verifies and decodes the data Apple signs as a JWS: transactions, renewal infos, app
/// transactions and V2 notifications.
///
/// Verification, in order: compact form; header `alg` is ES256 (nothing else is accepted);
/// an `x5c` of exactly three certificates chaining to a trusted root with Apple's markers,
/// valid at the payload's `signedDate` (or now, by configuration); the ES256 signature; then
/// the payload's bundle id, app Apple id (production) and environment.
public struct SignedDataVerifier: Sendable {
    /// When the certificate chain must be valid.
    public enum ValidationTime: Sendable, Hashable {
        /// At the payload's `signedDate` (what Apple's libraries do offline), falling back to now.
        case signedDate
        /// At the moment of verification.
        case now
        /// At a given time (tests, `entitle verify --at`).
        case fixed(Date)
    }

    public struct Configuration: Sendable {
        /// The trusted roots. Apple Root CA - G3 by default.
        public var roots: [Certificate] = AppleRootCertificates.signedDataRoots
        /// The app's bundle id; `nil` accepts any (and reports it).
        public var bundleId: String?
        /// The app's Apple id, checked for production data when set.
        public var appAppleId: Int64?
        /// The only environment accepted; `nil` accepts any (subject to `allowedTestEnvironments`).
        public var environment: AppStoreEnvironment?
        /// Xcode and LocalTesting data are refused unless named here.
        public var allowedTestEnvironments: Set<AppStoreEnvironment> = []
        public var validationTime: ValidationTime = .signedDate
        /// OCSP for each new chain (off by default; needs network access to Apple).
        public var revocationChecker: RevocationChecker?

        public init(
            bundleId: String? = nil, appAppleId: Int64? = nil, environment: AppStoreEnvironment? = nil,
            roots: [Certificate] = AppleRootCertificates.signedDataRoots
        ) {
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.environment = environment
            self.roots = roots
        }
    }

    public let configuration: Configuration
    private let chainVerifier: CertificateChainVerifier
    private let headers = JWSHeaderCache()

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.chainVerifier = CertificateChainVerifier(
            roots: configuration.roots, revocationChecker: configuration.revocationChecker)
    }

    /// Verifies a `signedTransactionInfo` / `jwsRepresentation`.
    public func verifyTransaction(_ jws: String) async throws(AppStoreError) -> JWSTransaction {
        try await verify(jws, as: JWSTransaction.self)
    }

    /// Verifies a `signedRenewalInfo`.
    public func verifyRenewalInfo(_ jws: String) async throws(AppStoreError) -> JWSRenewalInfo {
        try await verify(jws, as: JWSRenewalInfo.self)
    }

    /// Verifies a signed app transaction.
    public func verifyAppTransaction(_ jws: String) async throws(AppStoreError) -> AppTransaction {
        try await verify(jws, as: AppTransaction.self)
    }

    /// Verifies a V2 notification's `signedPayload` (not the nested transaction and renewal
    /// info: see ``verifyNotificationContents(_:)``).
    public func verifyNotification(_ signedPayload: String) async throws(AppStoreError) -> NotificationPayload {
        try await verify(signedPayload, as: NotificationPayload.self)
    }

    /// Verifies a V2 notification and everything signed inside it.
    public func verifyNotificationContents(_ signedPayload: String) async throws(AppStoreError) -> VerifiedNotification {
        let payload = try await verifyNotification(signedPayload)
        var result = VerifiedNotification(payload: payload)
        if let signed = payload.data?.signedTransactionInfo {
            result.transaction = try await verifyTransaction(signed)
        }
        if let signed = payload.data?.signedRenewalInfo {
            result.renewalInfo = try await verifyRenewalInfo(signed)
        }
        if let signed = payload.appData?.signedAppTransactionInfo {
            result.appTransaction = try await verifyAppTransaction(signed)
        }
        return result
    }

    /// Verifies any JWS Apple signs and decodes its payload as `Payload`.
    public func verify<Payload: SignedPayload>(
        _ jws: String, as type: Payload.Type
    ) async throws(AppStoreError)
        -> Payload
    {
        let token = try CompactJWS(jws, headers: headers)
        let payload: Payload = try token.decodePayload()
        let time: Date
        switch configuration.validationTime {
        case .signedDate: time = (payload.signedDate ?? token.fallbackSignedDate())?.date ?? Date()
        case .now: time = Date()
        case .fixed(let fixed): time = fixed
        }

        let key: P256.Signing.PublicKey
        if token.certificateChain.count == 1, configuration.allowedTestEnvironments.contains(.xcode) {
            // Xcode's StoreKit testing signs with a self-signed key: it proves integrity, not origin,
            // so only Xcode data is accepted this way.
            key = try Self.selfSignedKey(token)
            guard payload.payloadEnvironment == .xcode else {
                throw AppStoreError(.invalidCertificateChain, "a single self-signed certificate is only accepted for Xcode data")
            }
        } else {
            guard token.certificateChain.count == 3 else {
                throw AppStoreError(
                    .invalidCertificateChain, "x5c has \(token.certificateChain.count) certificates; Apple sends three")
            }
            let chain: CertificateChainVerifier.VerifiedChain
            if let seen = token.cachedChain, seen.cachedUntil > Date() {
                // The same header bytes, so the same certificates: this chain, at this payload's time.
                try CertificateChainVerifier.checkValidity(seen, at: time)
                chain = seen
            } else {
                let cacheKey = token.certificateChain[0] + "." + token.certificateChain[1]
                if let cached = try chainVerifier.cachedChain(for: cacheKey, at: time) {
                    chain = cached
                } else {
                    let certificates = try token.parseCertificates()
                    chain = try await chainVerifier.verify(
                        leaf: certificates[0], intermediates: [certificates[1]], at: time, cacheKey: cacheKey)
                }
                headers.keep(token.header, bytes: token.headerBytes, chain: chain)
            }
            guard let leafKey = chain.leafP256Key else {
                throw AppStoreError(.invalidCertificateChain, "the signing certificate's key is not P-256")
            }
            key = leafKey
        }
        guard token.isValidSignature(with: key) else {
            throw AppStoreError(.invalidSignature, "the ES256 signature does not match the header and payload")
        }
        if let problem = payload.kindProblem { throw AppStoreError(.invalidFormat, problem) }
        try check(payload)
        return payload
    }

    /// Checks what the (now authentic) payload says about app and environment, in the order
    /// Apple's library does (app identity before environment).
    private func check(_ payload: some SignedPayload) throws(AppStoreError) {
        let environment = payload.payloadEnvironment
        if let environment, environment == .xcode || environment == .localTesting,
            !configuration.allowedTestEnvironments.contains(environment)
        {
            throw AppStoreError(.invalidEnvironment, "\(environment) data is not accepted by this verifier")
        }
        if let expected = configuration.bundleId {
            // As Apple's library does: a transaction or notification that names no app is not
            // this app's (else a payload with the bundle id left out would pass for any app).
            switch payload.payloadBundleId {
            case expected?: break
            case let bundleId?: throw AppStoreError(.invalidAppIdentifier, "bundle id \(bundleId) is not \(expected)")
            case nil where type(of: payload).namesItsApp:
                throw AppStoreError(.invalidAppIdentifier, "the payload names no bundle id; expected \(expected)")
            case nil: break
            }
        }
        if let expected = configuration.appAppleId, environment == .production,
            let appAppleId = payload.payloadAppAppleId, appAppleId != expected
        {
            throw AppStoreError(.invalidAppIdentifier, "app Apple id \(appAppleId) is not \(expected)")
        }
        if let expected = configuration.environment, environment != expected {
            throw AppStoreError(
                .invalidEnvironment, "data is from \(environment?.rawValue ?? "no environment"), expected \(expected)")
        }
    }

    private static func selfSignedKey(_ token: CompactJWS) throws(AppStoreError) -> P256.Signing.PublicKey {
        let certificate = try token.parseCertificates()[0]
        guard let key = P256.Signing.PublicKey(certificate.publicKey) else {
            throw AppStoreError(.invalidCertificateChain, "the signing certificate's key is not P-256")
        }
        return key
    }
}

/// A verified V2 notification with its nested signed data verified and decoded.
public struct VerifiedNotification: Sendable, Hashable {
    public var payload: NotificationPayload
    public var transaction: JWSTransaction?
    public var renewalInfo: JWSRenewalInfo?
    public var appTransaction: AppTransaction?

    public init(payload: NotificationPayload) { self.payload = payload }
}
