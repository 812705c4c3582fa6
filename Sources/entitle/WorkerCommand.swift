import ArgumentParser
import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import JobQueue
import Logging
import Metrics
import Prometheus
import ServiceLifecycle

/// `entitle worker`: consumes queues until SIGTERM or SIGINT.
struct WorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run jobs from Redis queues until SIGTERM/SIGINT (then finish or requeue what runs)."
    )

    @OptionGroup var options: RedisOptions

    @Option(help: "Queues and their concurrency, NAME=CONCURRENCY,... (default: default=16).")
    var queues: String = "default=16"

    @Option(help: "Serve Prometheus metrics on http://127.0.0.1:PORT/metrics.")
    var metricsPort: Int?

    @Option(help: "Address the metrics port listens on.")
    var metricsHost: String = "127.0.0.1"

    @Option(help: "Seconds running jobs get to finish after SIGTERM before they are requeued.")
    var shutdownTimeout: Double = 25

    @Option(help: "Seconds without a heartbeat after which other workers reap this one's jobs.")
    var heartbeatTTL: Double = 5

    @Option(help: "Seconds one blocking claim (BLMOVE) waits on the server before the worker looks around again.")
    var blockTimeout: Double = 1

    @Option(
        help: """
            Jobs each queue may claim ahead of a free handler slot when it has a backlog, so a finished job's slot \
            goes to the next at once (default: a quarter of the queue's concurrency, at most 16; 0: claim only for free slots).
            """)
    var prefetch: Int?

    @Option(
        help: """
            Redis connections this process opens for its handlers (blocking claims use their own); calls that find \
            them all busy share their next write, so a few serve many jobs.
            """)
    var connections: Int = 4

    @Flag(
        inversion: .prefixedNo,
        help:
            "Fold the event log into the reports in this process (--no-reports: leave it to other workers, or to an `entitle worker --queues reports=1` of its own)."
    )
    var reports = true

    @Flag(
        inversion: .prefixedNo,
        help: """
            Queue each publisher's reconcile job (Get Notification History) once per its reconcileIntervalSeconds \
            (default: on in production, off with ENTITLE_ENV=development, where tests and demos drive the \
            simulator's notifications themselves).
            """)
    var reconcile: Bool?

    @Option(
        help: """
            The publishers' catalog (JSON), which enables the entitlement jobs (default: $ENTITLE_CATALOG; with \
            ENTITLE_ENV=development, Config/catalog.development.json).
            """)
    var catalog: String?

    func validate() throws {
        _ = try Self.parseQueues(queues)
        if let metricsPort, !(1...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 1-65535") }
        guard (0...3600).contains(shutdownTimeout) else { throw ValidationError("--shutdown-timeout must be 0 to 3600 seconds") }
        if let prefetch, !(0...1000).contains(prefetch) { throw ValidationError("--prefetch must be 0 to 1000") }
        guard (1...256).contains(connections) else { throw ValidationError("--connections must be 1-256") }
        guard (1...3600).contains(heartbeatTTL) else { throw ValidationError("--heartbeat-ttl must be 1 to 3600 seconds") }
        guard (0.1...60).contains(blockTimeout) else { throw ValidationError("--block-timeout must be 0.1-60 seconds") }
    }

    /// A publisher of the catalog (`option`, `$ENTITLE_CATALOG` or the development one),
    /// for a command that checks its input against it (`why` says what is read).
    static func publisher(_ id: String, catalog option: String?, why: String) throws -> Publisher {
        guard let path = catalogPath(option) else { throw ValidationError("give --catalog (or ENTITLE_CATALOG): \(why)") }
        let publishers: EntitlementCatalog
        do {
            publishers = try EntitlementCatalog(json: try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw CommandFailure("cannot use the catalog \(path): \(error)")
        }
        guard let found = publishers.publisher(id) else { throw CommandFailure("no publisher \(id) in the catalog \(path)") }
        return found
    }

    /// The catalog to load: the option, `$ENTITLE_CATALOG`, or the development catalog.
    static func catalogPath(_ option: String?) -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let path = option ?? environment["ENTITLE_CATALOG"].flatMap({ $0.isEmpty ? nil : $0 }) { return path }
        guard environment["ENTITLE_ENV"] == "development" else { return nil }
        return ConfigFiles.find("catalog.development.json")?.path
    }

    /// Registers the entitlement jobs; returns the services that go with them: the renewal
    /// sweep, the reconcile schedule and the folder that keeps the reports.
    static func addEntitlementJobs(
        to handlers: inout JobHandlerRegistry, settings: EntitleConfiguration, jobQueue: JobQueue, queue: String,
        crashAfterWrite: Bool = false, reports: Bool = true, reconcile: Bool? = nil, logger: Logger
    ) -> [any Service] {
        var service = EntitlementService(configuration: settings, jobQueue: jobQueue, logger: logger)
        if crashAfterWrite {
            service.afterEntitlementWrite = { job in
                logger.critical("crash point after-entitlement-write: SIGKILL", metadata: ["job": "\(job.id)"])
                kill(getpid(), SIGKILL)
            }
        }
        EntitlementJobs.register(in: &handlers, service: service)
        let development = settings.mode != .production
        let sweep = RenewalSweep(service: service, queue: queue, interval: development ? .seconds(1) : .seconds(15), logger: logger)
        let folder = ReportFolder(
            store: service.store, catalog: settings.catalog, interval: .seconds(1), logger: logger)
        var services: [any Service] = [sweep]
        if reconcile ?? !development {
            services.append(
                ReconcileSchedule(service: service, queue: queue, tick: development ? .seconds(5) : .seconds(60), logger: logger))
        }
        if reports { services.append(folder) }
        return services
    }

    static func parseQueues(_ text: String) throws -> [String: Int] {
        var result: [String: Int] = [:]
        for item in text.split(separator: ",") {
            let parts = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, let concurrency = Int(parts[1]), (1...10_000).contains(concurrency) else {
                throw ValidationError("--queues takes NAME=CONCURRENCY,... with concurrency 1-10000, got '\(item)'")
            }
            do {
                try EnqueueRequest(type: "x", queue: parts[0]).validate()
            } catch let error as JobQueueError {
                throw ValidationError(error.message)
            }
            result[parts[0]] = concurrency
        }
        guard !result.isEmpty else { throw ValidationError("--queues names no queue") }
        return result
    }

    func run() async throws {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let logger = options.makeLogger("entitle.worker")
        let tracing = try TracingBootstrap.start(role: "worker", environment: ProcessInfo.processInfo.environment, logger: logger)
        let concurrency = try Self.parseQueues(queues)
        let jobQueue = try options.makeJobQueue(logger: logger, connections: connections)
        var configuration = WorkerService.Configuration(concurrency: concurrency)
        configuration.shutdownTimeout = .milliseconds(Int64(shutdownTimeout * 1000))
        for name in configuration.queues.keys {
            configuration.queues[name]?.heartbeatTTL = .milliseconds(Int64(heartbeatTTL * 1000))
            configuration.queues[name]?.heartbeatInterval = .milliseconds(Int64(heartbeatTTL * 1000 / 5))
            configuration.queues[name]?.blockTimeout = .milliseconds(Int64(blockTimeout * 1000))
            if let prefetch { configuration.queues[name]?.prefetch = prefetch }
        }
        var handlers = JobHandlerRegistry.builtIn()
        var services: [any Service] = []
        if let catalogPath = Self.catalogPath(catalog) {
            let environment = ProcessInfo.processInfo.environment
            let settings: EntitleConfiguration
            do {
                settings = try await EntitleConfiguration.load(catalogPath: catalogPath, environment: environment, logger: logger)
            } catch let error as WorkerError {
                throw CommandFailure("entitle worker: \(error.message)")
            }
            let crash = settings.mode != .production && environment["ENTITLE_CRASH_POINT"] == "after-entitlement-write"
            services.append(
                contentsOf: Self.addEntitlementJobs(
                    to: &handlers, settings: settings, jobQueue: jobQueue, queue: concurrency.keys.sorted().first ?? "default",
                    crashAfterWrite: crash, reports: reports, reconcile: reconcile, logger: logger))
            // Rotated webhook secrets take effect on SIGHUP, without a restart.
            services.append(SecretsReloadService([("webhook secrets and APNs keys", { try settings.reloadSecrets() })], logger: logger))
            logger.info(
                "entitlement jobs enabled",
                metadata: ["catalog": "\(catalogPath)", "publishers": "\(settings.catalog.publishers.count)", "mode": "\(settings.mode)"])
        } else {
            logger.notice("no catalog (--catalog, ENTITLE_CATALOG or ENTITLE_ENV=development): entitlement jobs are not run")
        }
        let worker = WorkerService(configuration: configuration, jobQueue: jobQueue, registry: handlers, logger: logger)
        services.insert(worker, at: 0)
        services.append(QueueHistoryRecorder(jobQueue: jobQueue, logger: logger))
        if let metricsPort {
            services.append(MetricsServer.make(registry: registry, host: metricsHost, port: metricsPort, logger: logger))
        }
        // The exporter first, so it stops last and sends the spans of the jobs that drained.
        if let tracing { services.insert(tracing, at: 0) }
        logger.info(
            "worker starting",
            metadata: [
                "redis": "\(jobQueue.redis.configuration.displayAddress)", "queues": "\(queues)", "pid": "\(getpid())",
            ])
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services.map {
                    ServiceGroupConfiguration.ServiceConfiguration(service: $0, successTerminationBehavior: .gracefullyShutdownGroup)
                },
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await group.run()
        jobQueue.redis.close()
    }
}
