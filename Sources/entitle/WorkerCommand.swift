import ArgumentParser
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

    func validate() throws {
        _ = try Self.parseQueues(queues)
        if let metricsPort, !(1...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 1-65535") }
        guard shutdownTimeout >= 0 else { throw ValidationError("--shutdown-timeout cannot be negative") }
        guard heartbeatTTL >= 1 else { throw ValidationError("--heartbeat-ttl must be at least 1 second") }
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
        let concurrency = try Self.parseQueues(queues)
        let jobQueue = try options.makeJobQueue(logger: logger)
        var configuration = WorkerService.Configuration(concurrency: concurrency)
        configuration.shutdownTimeout = .milliseconds(Int64(shutdownTimeout * 1000))
        for name in configuration.queues.keys {
            configuration.queues[name]?.heartbeatTTL = .milliseconds(Int64(heartbeatTTL * 1000))
            configuration.queues[name]?.heartbeatInterval = .milliseconds(Int64(heartbeatTTL * 1000 / 5))
        }
        let worker = WorkerService(configuration: configuration, jobQueue: jobQueue, registry: .builtIn(), logger: logger)
        var services: [any Service] = [worker]
        if let metricsPort {
            services.append(MetricsServer.make(registry: registry, host: metricsHost, port: metricsPort, logger: logger))
        }
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
