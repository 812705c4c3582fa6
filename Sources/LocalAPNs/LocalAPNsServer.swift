import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle

/// The local APNs server: HTTP/2 over TLS (ALPN h2) on a loopback port, a certificate made at start.
/// It serves Apple's provider API (`POST /3/device/<token>`), checks each request as APNs does, and
/// records what it accepts in `state`. A `Service`: it runs until cancelled or shut down gracefully.
public struct LocalAPNsServer: Service {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0 picks a free port; `onListening` tells which.
        public var port = 8443
        /// SETTINGS_MAX_CONCURRENT_STREAMS: APNs lets a provider keep many streams open on a connection.
        public var maxConcurrentStreams = 1000

        public init() {}
    }

    public let configuration: Configuration
    /// The keys, the pushes accepted, the faults: shared with control routes and tests.
    public let state: LocalAPNs
    private let certificates: ServerCertificates
    private let sslContext: NIOSSLContext
    private let logger: Logger
    private let onListening: @Sendable (Int) async -> Void

    public init(configuration: Configuration, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void = { _ in }) throws {
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
        state = LocalAPNs()
        certificates = try ServerCertificates()
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: certificates.serverDER, format: .der))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(certificates.serverKeyPEM.utf8), format: .pem)))
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        // How long a closing connection waits for the client's close_notify: at stop, a client that
        // never answers would otherwise hold the server for NIOSSL's default of 5 seconds.
        tls.shutdownTimeout = .seconds(1)
        sslContext = try NIOSSLContext(configuration: tls)
    }

    /// The CA that signed the server's certificate, PEM: clients trust it (and only it) to reach this server.
    public var certificateAuthorityPEM: String { certificates.authorityPEM }

    public func run() async throws {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let state = state
        let sslContext = sslContext
        let maxConcurrentStreams = configuration.maxConcurrentStreams
        let server = HTTPServerBuilder { responder in
            APNsHTTP2Channel(
                responder: responder, sslContext: sslContext, maxConcurrentStreams: maxConcurrentStreams,
                onConnectionClosed: { await state.connectionClosed($0) })
        }
        let app = Application(
            responder: APNsResponder(state: state), server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        try await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await app.run() }
                group.addTask {
                    for await port in ports {
                        await onListening(port)
                        break
                    }
                }
                for try await _ in group {}
            }
        }
    }
}

// swift-service-lifecycle logs its services: the server holds its TLS key, so it prints only
// where it listens.
extension LocalAPNsServer: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "LocalAPNsServer(host: \(configuration.host), port: \(configuration.port))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
