import AppStore
import DurationUnits
import EntitleCore
import Foundation
import JobQueue
import Logging
import ServiceLifecycle

/// The safety net under scheduled renewal checks: every `interval`, any subscription whose
/// check is overdue by more than `grace` (its scheduled job was lost, or ran out of
/// attempts) gets a new `renewal-check` job. Every worker process runs one; the idempotency
/// key makes them agree.
package struct RenewalSweep: Service, CustomStringConvertible {
    let service: EntitlementService
    let queue: String
    let interval: Duration
    let grace: Duration
    let logger: Logger

    package init(service: EntitlementService, queue: String, interval: Duration, grace: Duration, logger: Logger) {
        self.service = service
        self.queue = queue
        self.interval = interval
        self.grace = grace
        self.logger = logger
    }

    // swift-service-lifecycle logs its services: say what this one is, and nothing of the
    // configuration it holds.
    package var description: String { "RenewalSweep(queue: \(queue), interval: \(interval), grace: \(grace))" }

    package func run() async throws {
        await everyRound(of: interval, logger: logger, failure: "renewal sweep failed") { try await sweep() }
    }

    /// Enqueues checks for overdue subscriptions; returns how many were found.
    @discardableResult
    package func sweep(limit: Int = 500) async throws -> Int {
        let now = try await service.configuration.clock.now()
        let cutoff = AppleTimestamp(now.addingTimeInterval(-grace.seconds)).milliseconds
        let due = try await service.store.dueRenewalChecks(cutoffMs: cutoff, limit: limit)
        let requests = try due.map { check in
            try EnqueueRequest(
                type: EntitlementJobType.renewalCheck.rawValue,
                payload: JobPayloads.encode(
                    JobPayloads.RenewalCheck(publisher: check.publisher, originalTransactionId: check.originalTransactionId)),
                queue: queue, idempotencyKey: "renewal-sweep:\(check.publisher)/\(check.originalTransactionId):\(check.dueMs)")
        }
        if !requests.isEmpty {
            let created = try await service.jobQueue.enqueue(batch: requests).filter(\.created).count
            if created > 0 { logger.info("renewal sweep enqueued overdue checks", metadata: ["count": "\(created)"]) }
        }
        return requests.count
    }
}
