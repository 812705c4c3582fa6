import AsyncHTTPClient
import DurationUnits
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// APNs' provider API: `POST /3/device/{token}` over HTTP/2 with a provider token.
///
/// The `HTTPClient` negotiates HTTP/2 (ALPN) and carries many pushes as streams of one
/// connection per host; `httpClient(owner:trusting:)` makes one per key and keeps it for
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
            guard Self.failedBeforeSending(error) else {
                throw APNsError(.unanswered, "\(host) did not answer a push it may have received: \(error)")
            }
            throw APNsError(.unavailable, "\(host) could not be reached: \(error)")
        }
    }

    /// Whether the request never left: no connection, no TLS session. Anything later (a
    /// deadline, a reset, a GOAWAY mid-stream) may have delivered the push.
    static func failedBeforeSending(_ error: any Error) -> Bool {
        if let client = error as? HTTPClientError {
            return [.connectTimeout, .tlsHandshakeTimeout, .invalidURL, .alreadyShutdown, .getConnectionFromPoolTimeout].contains(client)
        }
        if error is NIOConnectionError || error is NIOSSLError { return true }
        if let channel = error as? ChannelError, case .connectTimeout = channel { return true }
        if let posix = error as? IOError, [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH].contains(posix.errnoCode) { return true }
        return false
    }

    /// An `HTTPClient` for APNs that trusts only `certificateAuthorityPEM` (the local APNs's
    /// CA), or the system's roots when `nil` (Apple's servers chain to USERTrust RSA
    /// Certification Authority since 2025), kept for the process's life: its HTTP/2
    /// connections carry every push of the key.
    ///
    /// One client per `owner` (a publisher's key): APNs binds a connection to the team whose
    /// token its first push carried, so two publishers never share one.
    public static func httpClient(owner: String, trusting certificateAuthorityPEM: String?) throws(APNsError) -> HTTPClient {
        let name = owner + "\n" + (certificateAuthorityPEM ?? "")
        if let existing = clients.withLock({ $0[name] }) { return existing }
        var tls = TLSConfiguration.makeClientConfiguration()
        if let certificateAuthorityPEM {
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(certificateAuthorityPEM.utf8)))
            } catch {
                throw APNsError(.invalidConfiguration, "the APNs certificate authority is not PEM certificates")
            }
        }
        tls.minimumTLSVersion = .tlsv12
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        configuration.redirectConfiguration = .disallow
        configuration.connectionPool.idleTimeout = .minutes(60)
        // AsyncHTTPClient's own request spans would record the URL, whose path is the device token.
        configuration.tracing.tracer = nil
        return clients.withLock { clients in
            if let existing = clients[name] { return existing }
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            clients[name] = client
            return client
        }
    }

    private static let clients = Mutex<[String: HTTPClient]>([:])
}

// The client holds the provider token (a bearer credential): it prints where it sends only.
extension APNsClient: CustomStringConvertible, CustomReflectable {
    public var description: String { "APNsClient(\(configuration.productionURL), \(configuration.sandboxURL))" }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
