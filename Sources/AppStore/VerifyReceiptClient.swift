import AsyncHTTPClient
import Foundation

/// The legacy verifyReceipt endpoint: production first, then sandbox on 21007 (a sandbox
/// receipt sent to production), production again on 21008.
///
/// Apple deprecated verifyReceipt, but apps in the field still send app receipts.
public struct VerifyReceiptClient: Sendable {
    public struct Configuration: Sendable {
        public var productionURL = "https://buy.itunes.apple.com/verifyReceipt"
        public var sandboxURL = "https://sandbox.itunes.apple.com/verifyReceipt"
        /// The app-specific shared secret; sent only when set (needed for auto-renewable subscriptions).
        public var sharedSecret: String?
        public var excludeOldTransactions = false
        public var timeout: Duration = .seconds(30)

        public init(sharedSecret: String? = nil) { self.sharedSecret = sharedSecret }
    }

    /// How verifyReceipt classed the receipt.
    public enum Outcome: Sendable, Hashable {
        /// Status 0.
        case valid
        /// Status 21006: the receipt is valid but its subscription has expired (iOS 6 receipts).
        case expired
    }

    /// A receipt verifyReceipt accepted.
    public struct Result: Sendable {
        public var outcome: Outcome
        /// Which endpoint answered.
        public var environment: AppStoreEnvironment
        public var response: VerifyReceiptResponse
    }

    public let configuration: Configuration
    private let transport: AppleHTTPTransport

    public init(configuration: Configuration = Configuration(), httpClient: HTTPClient = .shared) {
        self.configuration = configuration
        self.transport = AppleHTTPTransport(httpClient: httpClient, timeout: configuration.timeout)
    }

    /// Verifies base64 receipt data (an app receipt or an iOS 6 transaction receipt).
    public func verify(receiptData: String) async throws(AppStoreError) -> Result {
        var environment = AppStoreEnvironment.production
        // At most one redirect each way; Apple never sends a receipt back and forth.
        for _ in 0..<3 {
            let response = try await post(receiptData, to: environment)
            switch response.status {
            case 21007 where environment == .production: environment = .sandbox
            case 21008 where environment == .sandbox: environment = .production
            default: return try Self.classify(response, environment: environment)
            }
        }
        throw AppStoreError(.requestRejected, "verifyReceipt redirected between environments more than once", retryable: true)
    }

    private func post(
        _ receiptData: String, to environment: AppStoreEnvironment
    ) async throws(AppStoreError)
        -> VerifyReceiptResponse
    {
        var body: [String: Any] = ["receipt-data": receiptData]
        if let secret = configuration.sharedSecret { body["password"] = secret }
        if configuration.excludeOldTransactions { body["exclude-old-transactions"] = true }
        let bytes: [UInt8]
        do {
            bytes = Array(try JSONSerialization.data(withJSONObject: body))
        } catch {
            throw AppStoreError(.invalidFormat, "the receipt data cannot be sent as JSON")
        }
        let url = environment == .sandbox ? configuration.sandboxURL : configuration.productionURL
        let response = try await transport.send(
            method: .POST, url: url, route: URL(string: url)?.path ?? "/verifyReceipt", headers: [("Content-Type", "application/json")],
            body: bytes)
        guard response.status == 200 else {
            throw AppStoreError(
                .serverUnavailable, "verifyReceipt answered HTTP \(response.status)",
                retryable: response.status >= 500 || response.status == 429,
                httpStatus: response.status)
        }
        do {
            return try JSONDecoder().decode(VerifyReceiptResponse.self, from: Data(response.body))
        } catch {
            throw AppStoreError(.serverUnavailable, "verifyReceipt answered something that is not its JSON", retryable: true)
        }
    }

    /// Classes every verifyReceipt status: valid, expired, retryable or permanent.
    static func classify(
        _ response: VerifyReceiptResponse, environment: AppStoreEnvironment
    ) throws(AppStoreError)
        -> Result
    {
        let status = response.status
        switch status {
        case 0: return Result(outcome: .valid, environment: environment, response: response)
        case 21006: return Result(outcome: .expired, environment: environment, response: response)
        case 21002, 21005, 21009:
            throw AppStoreError(.serverUnavailable, Self.describe(status), retryable: true, apiErrorCode: status)
        case 21100...21199:
            let retryable = response.isRetryable ?? true
            throw AppStoreError(
                retryable ? .serverUnavailable : .requestRejected, Self.describe(status), retryable: retryable, apiErrorCode: status)
        case 21003, 21010:
            throw AppStoreError(.invalidSignature, Self.describe(status), apiErrorCode: status)
        case 21004:
            throw AppStoreError(.invalidConfiguration, Self.describe(status), apiErrorCode: status)
        default:
            throw AppStoreError(.requestRejected, Self.describe(status), apiErrorCode: status)
        }
    }

    static func describe(_ status: Int) -> String {
        let meaning: String
        switch status {
        case 21000: meaning = "the request to the App Store was not made using HTTP POST"
        case 21001: meaning = "this status code is no longer sent by the App Store"
        case 21002: meaning = "the receipt data was malformed or the service had a temporary issue"
        case 21003: meaning = "the receipt could not be authenticated"
        case 21004: meaning = "the shared secret does not match the one on file for the account"
        case 21005: meaning = "the receipt server was temporarily unable to provide the receipt"
        case 21006: meaning = "the receipt is valid, but the subscription has expired"
        case 21007: meaning = "this receipt is from the test environment"
        case 21008: meaning = "this receipt is from the production environment"
        case 21009: meaning = "internal data access error"
        case 21010: meaning = "the user account cannot be found or has been deleted"
        case 21100...21199: meaning = "internal data access error"
        default: meaning = "unknown status"
        }
        return "verifyReceipt status \(status): \(meaning)"
    }
}

// The configuration holds the app's shared secret: what prints of it (logs, `dump`, string
// interpolation) says whether one is set, never what it is.
extension VerifyReceiptClient.Configuration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "VerifyReceiptClient.Configuration(productionURL: \(productionURL), sandboxURL: \(sandboxURL), sharedSecret: \(sharedSecret == nil ? "none" : "<redacted>"))"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}

extension VerifyReceiptClient: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "VerifyReceiptClient(\(configuration))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["configuration": configuration]) }
}
