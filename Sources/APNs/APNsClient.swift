import AsyncHTTPClient
import DurationUnits
import Foundation
import NIOCore
import NIOSSL
import Synchronization

/// APNs' provider API: `POST /3/device/{token}` over HTTP/2 with a provider token.
///
/// The `HTTPClient` negotiates HTTP/2 (ALPN) and carries many pushes as streams of one
/// connection per host; `httpClient(trusting:)` makes one per trust anchor and keeps it for
/// the life of the process. A send returns what APNs answered; it throws only when APNs could
/// not be asked (`unavailable`, worth retrying) or the token cannot be made.
public struct APNsClient: Sendable {
    public enum Environment: String, Sendable, Hashable, Codable, CaseIterable {
        case production, sandbox
    }

    public struct Configuration: Sendable {
        public var productionURL = "https://api.push.apple.com"
        public var sandboxURL = "https://api.sandbox.push.apple.com"
        public var timeout: Duration = .seconds(15)

        public init() {}

        func url(_ environment: Environment) -> String { environment == .production ? productionURL : sandboxURL }
    }

    public let configuration: Configuration
    public let providerToken: APNsProviderToken
    let httpClient: HTTPClient

    public init(configuration: Configuration = .init(), providerToken: APNsProviderToken, httpClient: HTTPClient = .shared) {
        self.configuration = configuration
        self.providerToken = providerToken
        self.httpClient = httpClient
    }

    /// Sends `push` to one device. An `ExpiredProviderToken` answer renews the token (when it
    /// may be renewed) and sends once more.
    public func send(
        _ push: APNsPush, to token: DeviceToken, environment: Environment, apnsId: UUID
    ) async throws(APNsError) -> APNsResponse {
        var bearer = try providerToken.value()
        var response = try await exchange(push, token, environment, apnsId, bearer)
        if response.reason == APNsReason("ExpiredProviderToken"), try providerToken.renew(after: bearer) {
            bearer = try providerToken.value()
            response = try await exchange(push, token, environment, apnsId, bearer)
        }
        return response
    }

    private func exchange(
        _ push: APNsPush, _ token: DeviceToken, _ environment: Environment, _ apnsId: UUID, _ bearer: String
    ) async throws(APNsError) -> APNsResponse {
        let base = configuration.url(environment)
        var request = HTTPClientRequest(url: base + "/3/device/" + token.hex)
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer " + bearer)
        request.headers.add(name: "apns-topic", value: push.pushType.topic(bundleId: push.bundleId))
        request.headers.add(name: "apns-push-type", value: push.pushType.rawValue)
        request.headers.add(name: "apns-priority", value: String(push.priority))
        request.headers.add(name: "apns-id", value: apnsId.uuidString.lowercased())
        if let expiration = push.expiration { request.headers.add(name: "apns-expiration", value: String(expiration)) }
        if let collapseId = push.collapseId { request.headers.add(name: "apns-collapse-id", value: collapseId) }
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: push.payload))
        do {
            let answer = try await httpClient.execute(request, timeout: .nanoseconds(configuration.timeout.nanoseconds))
            let body = try await answer.body.collect(upTo: 64 << 10)
            let status = Int(answer.status.code)
            let echoed = answer.headers.first(name: "apns-id")
            if status == 200 { return APNsResponse(status: 200, apnsId: echoed) }
            let (reason, timestamp) = APNsResponse.decodeBody(Array(body.readableBytesView))
            return APNsResponse(status: status, apnsId: echoed, reason: reason, unregisteredAt: status == 410 ? timestamp : nil)
        } catch {
            let host = URL(string: base)?.host ?? "APNs"
            throw APNsError(.unavailable, "\(host) could not be asked: \(error)")
        }
    }

    /// An `HTTPClient` for APNs that trusts only `certificateAuthorityPEM` (the local APNs's
    /// CA), or the system's roots when `nil` (Apple's servers chain to USERTrust RSA
    /// Certification Authority since 2025). One per anchor, kept for the process's life:
    /// its HTTP/2 connections are what every push of the process shares.
    public static func httpClient(trusting certificateAuthorityPEM: String?) throws(APNsError) -> HTTPClient {
        guard let certificateAuthorityPEM else { return .shared }
        if let existing = clients.withLock({ $0[certificateAuthorityPEM] }) { return existing }
        var tls = TLSConfiguration.makeClientConfiguration()
        do {
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(certificateAuthorityPEM.utf8)))
        } catch {
            throw APNsError(.invalidConfiguration, "the APNs certificate authority is not PEM certificates")
        }
        tls.minimumTLSVersion = .tlsv12
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        configuration.redirectConfiguration = .disallow
        configuration.connectionPool.idleTimeout = .minutes(60)
        return clients.withLock { clients in
            if let existing = clients[certificateAuthorityPEM] { return existing }
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            clients[certificateAuthorityPEM] = client
            return client
        }
    }

    private static let clients = Mutex<[String: HTTPClient]>([:])
}
