import AppStoreSimulator
import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// `entitle simulator`: the local App Store, until SIGTERM or SIGINT.
struct SimulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulator",
        abstract: "Run the local App Store: Apple's verifyReceipt and Server API, notifications, and a control API.",
        discussion: """
            Apple's endpoints answer at their paths: production at /verifyReceipt and /inApps/..., sandbox under \
            /sandbox. The control API is under /simulator/ (see docs/simulator.md). Prints one line, \
            "simulator listening on URL", once it accepts requests.
            """
    )

    @Option(help: "Port to listen on (0 picks a free one).")
    var port: Int = 8081

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Product catalog (JSON); default: Config/simulator-catalog.json.")
    var catalog: String?

    @Option(help: "Where V2 notifications (signedPayload) are posted.")
    var notifyURL: String?

    @Option(name: .customLong("notify-url-v1"), help: "Where V1 (legacy JSON) notifications are posted.")
    var notifyURLV1: String?

    @Option(help: "Keep the signing keys in this directory, so the roots survive restarts.")
    var stateDir: String?

    @Option(
        name: .customLong("sandbox-renewal-limit"),
        help: "How many times a sandbox subscription renews before it expires (Apple's sandbox: 12; older sandboxes: 6).")
    var sandboxRenewalLimit: Int = 12

    @Option(help: "Port of the local APNs (HTTP/2 and TLS; 0 picks a free one; GET /simulator/apns says where it is).")
    var apnsPort: Int = 0

    @Flag(name: .customLong("no-apns"), help: "Serve no local APNs.")
    var noAPNs = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String?

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0-65535") }
        guard (0...65535).contains(apnsPort) else { throw ValidationError("--apns-port must be 0-65535") }
        guard (1...1000).contains(sandboxRenewalLimit) else { throw ValidationError("--sandbox-renewal-limit must be 1-1000") }
        for url in [notifyURL, notifyURLV1].compactMap({ $0 }) {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
                throw ValidationError("\(url) is not an http(s) URL")
            }
        }
    }

    func run() async throws {
        let logger = CLILogging.logger("entitle.simulator", level: logLevel)
        let catalogURL = try catalog.map { URL(fileURLWithPath: $0) } ?? Self.demoCatalog()
        let loaded: SimulatorCatalog
        do {
            loaded = try SimulatorCatalog(contentsOf: catalogURL)
        } catch let error as SimulatorError {
            throw ValidationError(error.message)
        }
        var configuration = SimulatorServer.Configuration(catalog: loaded)
        configuration.host = host
        configuration.port = port
        configuration.notifications = .init(url: notifyURL, v1URL: notifyURLV1)
        configuration.stateDirectory = stateDir.map { URL(fileURLWithPath: $0) }
        configuration.sandboxRenewalLimit = sandboxRenewalLimit
        if noAPNs {
            configuration.apns = nil
        } else {
            configuration.apns?.host = host
            configuration.apns?.port = apnsPort
        }
        let host = self.host
        let server = try SimulatorServer(configuration: configuration, logger: logger) { port in
            // Unbuffered, so a parent process reading a pipe sees it at once.
            FileHandle.standardOutput.write(Data("simulator listening on http://\(host):\(port)\n".utf8))
        }
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: server)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }

    /// The demo catalog: `$ENTITLE_CONFIG_DIR`, `./Config`, or the `Config` of the checkout
    /// the executable was built in.
    static func demoCatalog() throws -> URL {
        guard let file = ConfigFiles.find("simulator-catalog.json") else {
            throw ValidationError("no --catalog given and no Config/simulator-catalog.json found (set ENTITLE_CONFIG_DIR)")
        }
        return file
    }
}
