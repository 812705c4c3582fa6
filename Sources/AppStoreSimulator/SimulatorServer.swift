import AppStore
import Foundation
import Hummingbird
import LocalAPNs
import Logging
import ServiceLifecycle
import Synchronization

/// The local App Store over HTTP: Apple's endpoints at Apple's paths (production at `/`,
/// sandbox under `/sandbox`) and the control API under `/simulator/`. A `Service`: it runs
/// until cancelled or shut down gracefully, and applies scheduled renewals as time passes.
public struct SimulatorServer: Service {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0 picks a free port; `onListening` tells which.
        public var port = 8081
        public var catalog: SimulatorCatalog
        public var notifications = NotificationDispatcher.Configuration()
        /// Keep the signing keys here across restarts; fresh keys each start when `nil`.
        public var stateDirectory: URL?
        /// Sign with these instead (tests share one pair: RSA keys are slow to make).
        public var authorities: (signing: SigningAuthority, receipts: ReceiptSigningAuthority)?
        /// How often scheduled events (renewals, expiries) are applied.
        public var tickInterval: Duration = .milliseconds(500)
        /// Sandbox subscriptions renew at most this many times (Apple's sandbox today: 12;
        /// the Newsstand seed's older sandbox: 6), then expire.
        public var sandboxRenewalLimit = 12
        /// The local APNs served beside the App Store (HTTP/2 and TLS on a port of its own);
        /// `nil` serves none.
        public var apns: LocalAPNsServer.Configuration? = {
            var local = LocalAPNsServer.Configuration()
            local.port = 0
            return local
        }()

        public init(catalog: SimulatorCatalog) {
            self.catalog = catalog
        }
    }

    public let configuration: Configuration
    public let store: SimulatedAppStore
    public let keys = APIKeyRegistry()
    public let faults = FaultInjector()
    /// The local APNs, when configured.
    public let apns: LocalAPNsServer?
    /// The port the local APNs listens on, once it does.
    let apnsPort = ListeningPort()
    let logger: Logger
    private let onListening: @Sendable (Int) async -> Void

    public init(configuration: Configuration, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void = { _ in }) throws {
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
        let signing: SigningAuthority
        let receiptSigning: ReceiptSigningAuthority
        if let authorities = configuration.authorities {
            (signing, receiptSigning) = authorities
        } else if let directory = configuration.stateDirectory {
            signing = try SigningAuthority(directory: directory)
            receiptSigning = try ReceiptSigningAuthority(directory: directory)
        } else {
            signing = try SigningAuthority()
            receiptSigning = try ReceiptSigningAuthority()
        }
        let apnsPort = self.apnsPort
        apns = try configuration.apns.map { local in
            try LocalAPNsServer(configuration: local, logger: logger) { port in apnsPort.set(port) }
        }
        let clock = SimulatedClock()
        store = SimulatedAppStore(
            catalog: configuration.catalog, clock: clock, signing: signing, receiptSigning: receiptSigning,
            notifications: NotificationDispatcher(configuration: configuration.notifications, clock: clock, logger: logger),
            sandboxRenewalLimit: configuration.sandboxRenewalLimit)
    }

    public func run() async throws {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            router: makeRouter(), configuration: .init(address: .hostname(configuration.host, port: configuration.port)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        try await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await app.run() }
                if let apns { group.addTask { try await apns.run() } }
                group.addTask {
                    for await port in ports {
                        await onListening(port)
                        break
                    }
                }
                group.addTask {
                    // Scheduled lifecycle events: renewals, grace and retry ends, expiries.
                    while !Task.isCancelled {
                        try? await Task.sleep(for: configuration.tickInterval)
                        do { try await store.processDue() } catch {
                            logger.error("scheduled event failed", metadata: ["error": "\(error)"])
                        }
                    }
                }
                for try await _ in group {}
            }
        }
        await store.notifications.shutdown()
    }
}

// swift-service-lifecycle logs its services: the simulator's configuration holds its apps'
// shared secrets and its signing keys, so it prints only where it listens.
extension SimulatorServer: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "SimulatorServer(host: \(configuration.host), port: \(configuration.port))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}

/// A port a server reports once it listens, read by routes that must say where it is.
final class ListeningPort: Sendable {
    private let port = Mutex<Int?>(nil)

    func set(_ value: Int) { port.withLock { $0 = value } }

    /// The port, waiting up to `timeout` for the server to listen.
    func value(waiting timeout: Duration = .seconds(10)) async -> Int? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = port.withLock({ $0 }) { return value }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return port.withLock { $0 }
    }
}
