import Logging
import RedisClient
import ServiceLifecycle

/// A worker process's engine: one `QueueConsumer` per queue, plus the maintenance loop
/// that promotes due jobs, reaps lost consumers (of any process), trims the dead set and
/// refreshes the queue gauges.
///
/// As a `Service`, it stops claiming on graceful shutdown (SIGTERM/SIGINT through a
/// `ServiceGroup`), lets running jobs finish within `shutdownTimeout`, and requeues the rest.
public final class WorkerService: Service, Sendable {
    public struct Configuration: Sendable {
        /// Queue name -> settings (concurrency and timings).
        public var queues: [String: QueueConsumer.Settings]
        public var shutdownTimeout: Duration = .seconds(25)
        public var promoteInterval: Duration = .milliseconds(100)
        public var reapInterval: Duration = .seconds(1)
        public var statsInterval: Duration = .seconds(5)

        public init(queues: [String: QueueConsumer.Settings]) { self.queues = queues }

        /// The same concurrency for each queue, other settings default.
        public init(concurrency: [String: Int]) {
            self.queues = concurrency.mapValues { QueueConsumer.Settings(concurrency: $0) }
        }
    }

    public let configuration: Configuration
    public let jobQueue: JobQueue
    public let consumers: [QueueConsumer]
    private let logger: Logger

    public init(configuration: Configuration, jobQueue: JobQueue, registry: JobHandlerRegistry, logger: Logger) {
        self.configuration = configuration
        self.jobQueue = jobQueue
        self.logger = logger
        self.consumers = configuration.queues.sorted { $0.key < $1.key }.map { queue, settings in
            QueueConsumer(queue: queue, settings: settings, jobQueue: jobQueue, registry: registry, logger: logger)
        }
    }

    public func run() async throws {
        let queues = consumers.map(\.queue)
        if !queues.isEmpty {
            // SADD may run twice: a connection lost right after a failover is no reason to stop.
            var attempt = 0
            while true {
                do {
                    try await jobQueue.redis.send(["SADD", QueueKeys.registry(prefix: jobQueue.configuration.prefix)] + queues)
                    break
                } catch let error as RedisError where error.isRetryable && error.code != .poolClosed && attempt < 20 {
                    attempt += 1
                    logger.warning("could not register the queues; trying again", metadata: ["error": "\(error)"])
                    try await Task.sleep(for: .milliseconds(min(1000, 50 * attempt)))
                }
            }
        }
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for consumer in consumers {
                    group.addTask { await consumer.run(shutdownTimeout: self.configuration.shutdownTimeout) }
                }
                group.addTask { await self.maintain(queues) }
            }
        } onGracefulShutdown: {
            self.stop()
        }
    }

    /// Stops claiming everywhere; `run` returns once consumers have drained or requeued.
    public func stop() {
        logger.info("worker stopping: no new claims")
        for consumer in consumers { consumer.stopClaiming() }
    }

    private var stopping: Bool { consumers.allSatisfy { $0.gate.isStopped } }

    private func maintain(_ queues: [String]) async {
        let clock = ContinuousClock()
        var nextReap = clock.now
        var nextStats = clock.now
        var nextTrim = clock.now
        // This process's consumers are alive whatever their heartbeats say.
        let own = Set(consumers.map(\.consumerID))
        // Heartbeats are trusted only once this process has reached Redis without a gap for
        // longer than a heartbeat TTL: after Redis (or this process) was paused, every
        // heartbeat looks expired, live ones too, until their next beat lands.
        let ttl = consumers.map(\.settings.heartbeatTTL).min() ?? .seconds(5)
        let beat = consumers.map(\.settings.heartbeatInterval).max() ?? .seconds(1)
        let trustAfter = ttl + beat
        let gapLimit = max((ttl - beat) / 2, .milliseconds(500))
        // Trusted from the start: only a pause or a failure seen while running resets it.
        var healthySince = clock.now - trustAfter
        var lastContact: ContinuousClock.Instant?
        var failed = false
        while !stopping {
            for queue in queues {
                do {
                    try await jobQueue.promoteDueJobs(queue: queue)
                    let now = clock.now
                    if let last = lastContact, now - last > gapLimit {
                        logger.notice("no contact with Redis for a while; reaping waits for heartbeats to catch up")
                        healthySince = now
                    } else if lastContact == nil && failed {
                        healthySince = now
                    }
                    failed = false
                    lastContact = now
                    if now >= nextReap && now - healthySince >= trustAfter {
                        try await jobQueue.reapExpiredConsumers(queue: queue, sparing: own)
                    }
                    if clock.now >= nextTrim { try await jobQueue.trimDeadJobs(queue: queue) }
                    if clock.now >= nextStats { QueueMetrics.shared.record(try await jobQueue.stats(queue: queue)) }
                } catch {
                    lastContact = nil
                    failed = true
                    logger.warning("queue maintenance failed", metadata: ["queue": "\(queue)", "error": "\(error)"])
                }
            }
            if clock.now >= nextReap { nextReap = clock.now + configuration.reapInterval }
            if clock.now >= nextStats { nextStats = clock.now + configuration.statsInterval }
            if clock.now >= nextTrim { nextTrim = clock.now + .seconds(60) }
            try? await Task.sleep(for: configuration.promoteInterval)
        }
    }
}
