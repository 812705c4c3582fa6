import ArgumentParser
import Foundation
import HTTPAPI
import Hummingbird
import JobQueue
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import Worker

/// `entitle api`: the HTTP API and the dashboard, until SIGTERM or SIGINT.
struct APICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "api",
        abstract: "Serve the HTTP API and the dashboard (purchases, notifications, jobs, entitlements, metrics).",
        discussion: """
            Publishers' tokens come from the variables their catalog entries name; the dashboard's operator \
            routes need ENTITLE_ADMIN_TOKEN. Prints "api listening on URL" once it accepts requests. \
            docs/api.md lists the routes.
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

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0-65535") }
        guard (1...256).contains(connections) else { throw ValidationError("--connections must be 1-256") }
        guard (1024...(64 << 20)).contains(maxBodyBytes) else { throw ValidationError("--max-body-bytes must be 1024-67108864") }
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
        configuration.adminToken = environment["ENTITLE_ADMIN_TOKEN"]
        let application = try Self.application(
            settings: settings, jobQueue: jobQueue, configuration: configuration, environment: environment, registry: registry,
            host: host, port: port, logger: logger
        ) { url in
            FileHandle.standardOutput.write(Data("api listening on \(url)\n".utf8))
        }
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: application)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
        jobQueue.redis.close()
    }

    /// The API as a service; `onListening` gets its URL once it accepts requests.
    static func application(
        settings: EntitleConfiguration, jobQueue: JobQueue, configuration: EntitleAPI.Configuration, environment: [String: String],
        registry: PrometheusCollectorRegistry, host: String, port: Int, logger: Logger,
        onListening: @escaping @Sendable (String) async -> Void
    ) throws -> some Service {
        let api: EntitleAPI
        do {
            api = try EntitleAPI(
                settings: settings, jobQueue: jobQueue, configuration: configuration, environment: environment,
                metrics: { registry.emitToBuffer() }, logger: logger)
        } catch {
            throw CommandFailure("entitle api: \(error.message)")
        }
        return Application(
            router: api.makeRouter(), configuration: .init(address: .hostname(host, port: port), serverName: "entitle"),
            onServerRunning: { channel in await onListening("http://\(host):\(channel.localAddress?.port ?? port)") },
            logger: logger)
    }
}
