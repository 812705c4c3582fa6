import AppStore
import Foundation
import JobQueue
import Logging
import RedisClient
import ServiceLifecycle

/// The safety net under scheduled renewal checks: every `interval`, any subscription whose
/// check is overdue by more than `grace` (its scheduled job was lost, or ran out of
/// attempts) gets a new `renewal-check` job. Every worker process runs one; the idempotency
/// key makes them agree.
public struct RenewalSweep: Service, CustomStringConvertible {
    let service: EntitlementService
    let queue: String
    let interval: Duration
    let grace: Duration
    let logger: Logger

    public init(service: EntitlementService, queue: String, interval: Duration, grace: Duration, logger: Logger) {
        self.service = service
        self.queue = queue
        self.interval = interval
        self.grace = grace
        self.logger = logger
    }

    // swift-service-lifecycle logs its services: say what this one is, and nothing of the
    // configuration it holds.
    public var description: String { "RenewalSweep(queue: \(queue), interval: \(interval), grace: \(grace))" }

    public func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await sweep()
            } catch {
                logger.warning("renewal sweep failed", metadata: ["error": "\(error)"])
            }
            try? await gracefulShutdownSleep(for: interval)
        }
    }

    private func gracefulShutdownSleep(for duration: Duration) async throws {
        try await cancelWhenGracefulShutdown { try await Task.sleep(for: duration) }
    }

    /// Enqueues checks for overdue subscriptions; returns how many were found.
    @discardableResult
    public func sweep(limit: Int = 500) async throws -> Int {
        let now = try await service.configuration.clock.now()
        let cutoff = AppleTimestamp(now.addingTimeInterval(-grace.seconds)).milliseconds
        let due =
            try await service.jobQueue.redis.send([
                "ZRANGEBYSCORE", service.renewalIndex, "-inf", String(cutoff), "WITHSCORES", "LIMIT", "0", String(limit),
            ]).array?.compactMap(\.string) ?? []
        var requests: [EnqueueRequest] = []
        for index in stride(from: 0, to: due.count - 1, by: 2) {
            let parts = due[index].split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            let payload = JobPayloads.RenewalCheck(publisher: parts[0], originalTransactionId: parts[1])
            requests.append(
                EnqueueRequest(
                    type: "renewal-check", payload: JobPayloads.encode(payload), queue: queue,
                    idempotencyKey: "renewal-sweep:\(due[index]):\(due[index + 1])"))
        }
        if !requests.isEmpty {
            let created = try await service.jobQueue.enqueue(batch: requests).filter(\.created).count
            if created > 0 { logger.info("renewal sweep enqueued overdue checks", metadata: ["count": "\(created)"]) }
        }
        return requests.count
    }
}
