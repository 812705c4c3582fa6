import ArgumentParser
import EntitleCore
import Foundation
import HTTPAPI
import Hummingbird
import JobQueue
import Logging
import Metrics
import Prometheus
import ServiceLifecycle

/// `entitle api`: the HTTP API and the dashboard, until SIGTERM or SIGINT.
struct APICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "Serve the HTTP API and the dashboard (purchases, notifications, jobs, entitlements, metrics).",
        discussion: """
            Publishers' keys come from the variables their catalog entries name (or the files NAME_FILE \
            names, read again on SIGHUP for rotations); the operator routes need ENTITLE_ADMIN_TOKEN. Prints \
            "api listening on URL" once it accepts requests. docs/api.md lists the routes and who may call them.
            """
    )

    @OptionGroup var options: RedisOptions

    @Option(help: "Port to listen on (0 picks a free one).")
    var port: Int = 8080

    @Option(help: "Address to listen on (0.0.0.0 for every interface).")
    var host: String = "127.0.0.1"

    @Option(
        help: """
            The publishers' catalog (JSON) (default: $ENTITLE_CATALOG; with ENTITLE_ENV=development, \
            Config/catalog.development.json).
            """)
    var catalog: String?

    @Option(help: "The queue purchases and notifications go to.")
    var queue: String = "default"

    @Option(help: "Redis connections this process opens.")
    var connections: Int = 16

    @Option(help: "The largest request body accepted, in bytes.")
    var maxBodyBytes: Int = 1 << 20

    @Option(help: "Seconds a new connection may take to send its first request head.")
    var headerTimeout: Double = 10

    @Option(help: "Seconds a keep-alive connection may stay idle between requests.")
    var idleTimeout: Double = 75

    @Option(help: "Seconds a request may take from its head to the end of its body.")
    var requestTimeout: Double = 30

    @Option(help: "Connections served at once (at most the open-file limit less 512); more wait in the backlog.")
    var maxConnections: Int = 8192

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0-65535") }
        guard (1...256).contains(connections) else { throw ValidationError("--connections must be 1-256") }
        guard (1024...(64 << 20)).contains(maxBodyBytes) else { throw ValidationError("--max-body-bytes must be 1024-67108864") }
        guard (1...3600).contains(headerTimeout) else { throw ValidationError("--header-timeout must be 1 to 3600 seconds") }
        guard (1...3600).contains(idleTimeout) else { throw ValidationError("--idle-timeout must be 1 to 3600 seconds") }
        guard (1...3600).contains(requestTimeout) else { throw ValidationError("--request-timeout must be 1 to 3600 seconds") }
        guard (16...1_000_000).contains(maxConnections) else { throw ValidationError("--max-connections must be 16-1000000") }
        _ = try WorkerCommand.parseQueues("\(queue)=1")
    }

    func run() async throws {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = options.makeLogger("entitle.api")
        guard let catalogPath = WorkerCommand.catalogPath(catalog) else {
            throw CommandFailure("entitle api: no catalog (--catalog, ENTITLE_CATALOG, or ENTITLE_ENV=development)")
        }
        let environment = ProcessInfo.processInfo.environment
        let tracing = try TracingBootstrap.start(role: "api", environment: environment, logger: logger)
        let jobQueue = try options.makeJobQueue(logger: logger, connections: connections)
        let settings: EntitleConfiguration
        do {
            settings = try await EntitleConfiguration.load(catalogPath: catalogPath, environment: environment, logger: logger)
        } catch let error as WorkerError {
            throw CommandFailure("entitle api: \(error.message)")
        }
        var configuration = EntitleAPI.Configuration()
        configuration.queue = queue
        configuration.maxBodyBytes = maxBodyBytes
        configuration.headerTimeout = .milliseconds(Int64(headerTimeout * 1000))
        configuration.idleTimeout = .milliseconds(Int64(idleTimeout * 1000))
        configuration.requestTimeout = .milliseconds(Int64(requestTimeout * 1000))
        configuration.maxConnections = min(maxConnections, max(16, EntitleAPI.raiseOpenFileLimit() - 512))
        let services = try Self.services(
            settings: settings, jobQueue: jobQueue, configuration: configuration, registry: registry, host: host, port: port,
            logger: logger
        ) { url in
            FileHandle.standardOutput.write(Data("api listening on \(url)\n".utf8))
        }
        // The exporter first, so it stops last and sends what the API's last requests made.
        let group = ServiceGroup(
            configuration: .init(
                services: ([tracing].compactMap { $0 } + services).map { .init(service: $0) },
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        jobQueue.redis.close()
    }

    /// The API, and the reload of its credentials on SIGHUP, as services; `onListening` gets
    /// its URL once it accepts requests.
    static func services(
        settings: EntitleConfiguration, jobQueue: JobQueue, configuration: EntitleAPI.Configuration,
        registry: PrometheusCollectorRegistry, host: String, port: Int, logger: Logger,
        onListening: @escaping @Sendable (String) async -> Void
    ) throws -> [any Service] {
        let api: EntitleAPI
        do {
            api = try EntitleAPI(
                settings: settings, jobQueue: jobQueue, configuration: configuration, metrics: { registry.emitToBuffer() }, logger: logger)
        } catch {
            throw CommandFailure("entitle api: \(error.message)")
        }
        let reload = SecretsReloadService([("API credentials", { try api.reloadCredentials() })], logger: logger)
        return [api.makeApplication(host: host, port: port, onListening: onListening), reload]
    }
}
