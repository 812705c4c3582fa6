import AsyncHTTPClient
import Crypto
import DurationUnits
import Foundation
import NIOHTTP1
import Synchronization

/// The App Store Server API, authenticated with an ES256 JWT from the publisher's
/// In-App Purchase key (.p8).
///
/// Failures are `AppStoreError`s classed retryable or permanent. A 429 carries Apple's
/// `Retry-After`. In production, "transaction id not found" (4040010) and the 401 Apple
/// answers for apps not yet released are retried once against sandbox.
public struct AppStoreServerAPIClient: Sendable {
    public struct Configuration: Sendable {
        /// The key's id (the `kid` header).
        public var keyId: String
        /// The issuer id from App Store Connect (`iss`).
        public var issuerId: String
        public var bundleId: String
        public var environment: AppStoreEnvironment = .production
        /// Apple's recommended hosts since 2026-05-05; the earlier `api.storekit.itunes.apple.com`
        /// and `api.storekit-sandbox.itunes.apple.com` still work and can be set here.
        public var productionURL = Self.recommendedProductionURL
        public var sandboxURL = Self.recommendedSandboxURL
        public static let recommendedProductionURL = "https://api.storekit.apple.com"
        public static let recommendedSandboxURL = "https://api.storekit-sandbox.apple.com"
        /// Retry 4040010 and pre-release 401 answers against sandbox.
        public var sandboxFallback = true
        public var timeout: Duration = .seconds(30)
        /// Token lifetime; Apple refuses more than 60 minutes.
        public var tokenLifetime: Duration = .seconds(20 * 60)

        public init(keyId: String, issuerId: String, bundleId: String, environment: AppStoreEnvironment = .production) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.bundleId = bundleId
            self.environment = environment
        }
    }

    public let configuration: Configuration
    private let signingKey: P256.Signing.PrivateKey
    private let transport: AppleHTTPTransport
    private let token = TokenCache()

    /// - Parameter privateKeyPEM: the contents of the `.p8` file.
    public init(configuration: Configuration, privateKeyPEM: String, httpClient: HTTPClient = .shared) throws(AppStoreError) {
        guard configuration.tokenLifetime <= .seconds(3600), configuration.tokenLifetime > .zero else {
            throw AppStoreError(.invalidConfiguration, "the token lifetime must be at most 60 minutes")
        }
        do {
            signingKey = try P256.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
        } catch {
            throw AppStoreError(.invalidConfiguration, "the private key is not a P-256 .p8 key in PEM form")
        }
        self.configuration = configuration
        self.transport = AppleHTTPTransport(httpClient: httpClient, timeout: configuration.timeout)
    }

    // MARK: Endpoints

    /// Get Transaction Info.
    public func getTransactionInfo(transactionId: String) async throws(AppStoreError) -> TransactionInfoResponse {
        try await call(.GET, "/inApps/v1/transactions/{transactionId}", id: transactionId)
    }

    /// One page of Get Transaction History (v2); pass the previous page's `revision`.
    public func getTransactionHistory(
        transactionId: String, revision: String? = nil
    ) async throws(AppStoreError)
        -> HistoryResponse
    {
        try await call(.GET, "/inApps/v2/history/{transactionId}", id: transactionId, query: [("revision", revision)])
    }

    /// Every signed transaction of the customer, following `revision` through every page.
    public func getAllTransactionHistory(transactionId: String, pageLimit: Int = 1000) async throws(AppStoreError) -> [String] {
        var revision: String?
        var transactions: [String] = []
        for _ in 0..<pageLimit {
            let page = try await getTransactionHistory(transactionId: transactionId, revision: revision)
            transactions += page.signedTransactions ?? []
            guard page.hasMore == true, let next = page.revision, next != revision else { return transactions }
            revision = next
        }
        throw AppStoreError(.serverUnavailable, "transaction history has more than \(pageLimit) pages", retryable: false)
    }

    /// Get All Subscription Statuses, optionally only those with the given statuses.
    public func getAllSubscriptionStatuses(
        transactionId: String, status: [SubscriptionStatus] = []
    ) async throws(AppStoreError)
        -> StatusResponse
    {
        try await call(
            .GET, "/inApps/v1/subscriptions/{transactionId}", id: transactionId,
            query: status.map { ("status", String($0.rawValue)) })
    }

    /// One page of Get Refund History (v2).
    public func getRefundHistory(
        transactionId: String, revision: String? = nil
    ) async throws(AppStoreError)
        -> RefundHistoryResponse
    {
        try await call(.GET, "/inApps/v2/refund/lookup/{transactionId}", id: transactionId, query: [("revision", revision)])
    }

    /// One page of Get Notification History; pass the previous page's `paginationToken`.
    public func getNotificationHistory(
        _ request: NotificationHistoryRequest, paginationToken: String? = nil
    )
        async throws(AppStoreError) -> NotificationHistoryResponse
    {
        // Each environment's history from its own host: a production answer must not be the sandbox's.
        try await call(
            .POST, "/inApps/v1/notifications/history", query: [("paginationToken", paginationToken)], body: request, fallback: false)
    }

    /// Look Up Order ID (the id on the customer's emailed invoice).
    public func lookUpOrderId(_ orderId: String) async throws(AppStoreError) -> OrderLookupResponse {
        try await call(.GET, "/inApps/v1/lookup/{orderId}", id: orderId)
    }

    /// Send Consumption Information (V2, App Store Server API 1.19): Apple answers 202.
    public func sendConsumptionInformation(transactionId: String, _ request: ConsumptionRequest) async throws(AppStoreError) {
        let _: Empty = try await call(
            .PUT, "/inApps/v2/transactions/consumption/{transactionId}", id: transactionId, body: request)
    }

    /// Send Consumption Information V1, which Apple deprecated for the V2 endpoint.
    @available(*, deprecated, message: "Apple deprecated V1: use sendConsumptionInformation(transactionId:_:) with ConsumptionRequest")
    public func sendConsumptionData(transactionId: String, _ request: ConsumptionRequestV1) async throws(AppStoreError) {
        let _: Empty = try await call(
            .PUT, "/inApps/v1/transactions/consumption/{transactionId}", id: transactionId, body: request)
    }

    /// Extend a Subscription Renewal Date.
    public func extendSubscriptionRenewalDate(
        originalTransactionId: String, _ request: ExtendRenewalDateRequest
    )
        async throws(AppStoreError) -> ExtendRenewalDateResponse
    {
        try await call(.PUT, "/inApps/v1/subscriptions/extend/{originalTransactionId}", id: originalTransactionId, body: request)
    }

    /// Set App Account Token (API 1.16): binds a purchase made outside the app (an offer
    /// code, a purchase before sign-in) to the customer whose `appAccountToken` the publisher
    /// knows; later transactions and notifications carry it. The id must be an original
    /// transaction id of a purchase that is not family-shared (Apple's 4000187, 4000185); a
    /// token that is not a UUID is refused here, before Apple would (4000183).
    public func setAppAccountToken(originalTransactionId: String, appAccountToken: String) async throws(AppStoreError) {
        guard let uuid = UUID(uuidString: appAccountToken) else {
            throw AppStoreError(
                .invalidFormat, "the app account token must be a UUID (Apple's error \(AppleErrorCode.invalidAppAccountTokenUUID))")
        }
        let _: Empty = try await call(
            .PUT, "/inApps/v1/transactions/{originalTransactionId}/appAccountToken", id: originalTransactionId,
            body: UpdateAppAccountTokenRequest(appAccountToken: uuid.uuidString.lowercased()))
    }

    /// Get App Transaction Info (API 1.17): the customer's signed app transaction, by any of
    /// their transaction ids, original transaction ids or app transaction id.
    public func getAppTransactionInfo(transactionId: String) async throws(AppStoreError) -> AppTransactionInfoResponse {
        try await call(.GET, "/inApps/v1/transactions/appTransactions/{transactionId}", id: transactionId)
    }

    /// Finish Transaction (API 1.20): tells Apple the publisher's server has delivered the
    /// transaction's content, so the app need not see it again.
    public func finishTransaction(transactionId: String) async throws(AppStoreError) {
        let _: Empty = try await call(.POST, "/inApps/v1/transactions/{transactionId}/finish", id: transactionId)
    }

    /// Request a Test Notification.
    public func requestTestNotification() async throws(AppStoreError) -> SendTestNotificationResponse {
        try await call(.POST, "/inApps/v1/notifications/test")
    }

    // MARK: Transport

    struct Empty: Codable {}

    /// Calls `route` (Apple's path, with `{...}` where `id` goes: the span is named after the
    /// route, never the id).
    private func call<Response: Decodable>(
        _ method: HTTPMethod, _ route: String, id: String? = nil, query: [(String, String?)] = [],
        body: (some Encodable)? = Empty?.none, fallback: Bool = true
    ) async throws(AppStoreError) -> Response {
        var path = route
        if let id {
            let component = try Self.pathComponent(id)
            path = route.split(separator: "/", omittingEmptySubsequences: false)
                .map { $0.hasPrefix("{") ? component : String($0) }.joined(separator: "/")
        }
        let bodyBytes: [UInt8]?
        do {
            bodyBytes = try body.map { Array(try JSONEncoder().encode($0)) }
        } catch {
            throw AppStoreError(.invalidFormat, "the request body cannot be encoded")
        }
        var components = URLComponents()
        components.queryItems = query.compactMap { name, value in value.map { URLQueryItem(name: name, value: $0) } }
        let queryString = components.queryItems?.isEmpty == false ? "?" + (components.percentEncodedQuery ?? "") : ""

        let primary = configuration.environment == .sandbox ? configuration.sandboxURL : configuration.productionURL
        do {
            return try await send(method, primary + path + queryString, route: route, body: bodyBytes)
        } catch let error
            where fallback && configuration.environment == .production && configuration.sandboxFallback
            && (error.apiErrorCode == 4_040_010 || error.httpStatus == 401)
        {
            return try await send(method, configuration.sandboxURL + path + queryString, route: route, body: bodyBytes)
        }
    }

    private func send<Response: Decodable>(
        _ method: HTTPMethod, _ url: String, route: String, body: [UInt8]?
    ) async throws(AppStoreError)
        -> Response
    {
        var headers = [("Authorization", "Bearer \(try bearerToken())"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let response = try await transport.send(method: method, url: url, route: route, headers: headers, body: body)
        guard (200..<300).contains(response.status) else { throw Self.error(from: response) }
        if Response.self == Empty.self, let empty = Empty() as? Response { return empty }
        do {
            return try JSONDecoder().decode(Response.self, from: Data(response.body))
        } catch {
            throw AppStoreError(
                .serverUnavailable, "the App Store Server API answered an unreadable \(Response.self): \(CompactJWS.describe(error))",
                retryable: true, httpStatus: response.status)
        }
    }

    /// Apple's retryable error codes (the ones its documentation names "…Retryable").
    static let retryableErrorCodes: Set<Int> = [4_040_002, 4_040_004, 4_040_006, 5_000_001]

    static func error(from response: AppleHTTPTransport.Response) -> AppStoreError {
        let body = try? JSONDecoder().decode(APIErrorResponse.self, from: Data(response.body))
        let code = body?.errorCode
        let message =
            "App Store Server API HTTP \(response.status)" + (code.map { " error \($0)" } ?? "")
            + (body?.errorMessage.map { ": \($0)" } ?? "")
        switch response.status {
        case 429:
            return AppStoreError(
                .rateLimited, message, retryable: true, httpStatus: 429, apiErrorCode: code,
                retryAfter: response.headers.first(name: "Retry-After").flatMap { Self.retryAfter($0) })
        case 500..., 408:
            // A server error, or Apple timing out the request: nothing was said; ask again.
            return AppStoreError(.serverUnavailable, message, retryable: true, httpStatus: response.status, apiErrorCode: code)
        case 401:
            return AppStoreError(.invalidConfiguration, message + " (check the key, issuer and bundle id)", httpStatus: 401)
        default:
            let retryable = code.map(retryableErrorCodes.contains) ?? false
            return AppStoreError(
                retryable ? .serverUnavailable : .requestRejected, message, retryable: retryable, httpStatus: response.status,
                apiErrorCode: code)
        }
    }

    /// Apple's `Retry-After` is a UNIX time in milliseconds; a small number is taken as
    /// HTTP's delay in seconds.
    static func retryAfter(_ header: String, now: Date = Date()) -> Date? {
        guard let value = Int64(header.trimmingCharacters(in: .whitespaces)), value >= 0 else { return nil }
        if value >= 100_000_000_000 { return AppleTimestamp(milliseconds: value).date }
        return now.addingTimeInterval(Double(value))
    }

    // MARK: Authentication

    /// The current bearer token, renewed a minute before it expires.
    func bearerToken(now: Date = Date()) throws(AppStoreError) -> String {
        if let current = token.current.withLock({ $0 }), current.expires.timeIntervalSince(now) > 60 { return current.value }
        let lifetime = configuration.tokenLifetime.seconds.rounded(.down)
        let issuedAt = Int(now.timeIntervalSince1970)
        let header: [String: Any] = ["alg": "ES256", "kid": configuration.keyId, "typ": "JWT"]
        let claims: [String: Any] = [
            "iss": configuration.issuerId, "iat": issuedAt, "exp": issuedAt + Int(lifetime),
            "aud": "appstoreconnect-v1", "bid": configuration.bundleId,
        ]
        let signingInput: String
        let signature: P256.Signing.ECDSASignature
        do {
            signingInput =
                AppleBase64.encodeURL(try JSONSerialization.data(withJSONObject: header, options: .sortedKeys)) + "."
                + AppleBase64.encodeURL(try JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
            signature = try signingKey.signature(for: Data(signingInput.utf8))
        } catch {
            throw AppStoreError(.invalidConfiguration, "the API token cannot be signed")
        }
        let value = signingInput + "." + AppleBase64.encodeURL(signature.rawRepresentation)
        token.current.withLock { $0 = (value, now.addingTimeInterval(lifetime)) }
        return value
    }

    /// Ids go into URL paths: only digits, letters and a few marks, so nothing can change the path.
    static func pathComponent(_ id: String) throws(AppStoreError) -> String {
        // ASCII letters, digits, `-`, `_` and `.`, checked byte by byte: every call to Apple
        // makes this check.
        func allowed(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                true
            default: false
            }
        }
        guard !id.utf8.isEmpty, id.utf8.count <= 128, id.utf8.allSatisfy(allowed), id != ".", id != ".." else {
            throw AppStoreError(.invalidFormat, "not a transaction or order id")
        }
        return id
    }
}

/// The bearer token shared by copies of one client.
final class TokenCache: Sendable {
    let current = Mutex<(value: String, expires: Date)?>(nil)
}

// The client holds the In-App Purchase key and its bearer tokens: what prints of it names
// the key, never its material.
extension AppStoreServerAPIClient: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "AppStoreServerAPIClient(keyId: \(configuration.keyId), bundleId: \(configuration.bundleId), environment: \(configuration.environment.rawValue), key: <redacted>)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
