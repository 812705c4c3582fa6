import AppStore
import DurationUnits
import EntitleCore
import Foundation
import JobQueue
import Logging
import ServiceLifecycle

/// The schedule of renewal checks: every `interval`, each subscription whose check is due
/// in the renewal index (App Store time) gets a `renewal-check` job. A subscription waiting
/// for its next period costs its index entry and nothing else (a delayed job per
/// subscription would hold a job record and a scheduled-set entry for the whole period).
/// Every worker process runs one; the idempotency key (the subscription and the due date,
/// the key a delayed check of an earlier version was queued under too) makes them agree,
/// and a check whose job was lost or ran out of attempts is asked again once that key has
/// expired.
package struct RenewalSweep: Service, CustomStringConvertible {
    let service: EntitlementService
    let queue: String
    let interval: Duration
    let logger: Logger

    package init(service: EntitlementService, queue: String, interval: Duration, logger: Logger) {
        self.service = service
        self.queue = queue
        self.interval = interval
        self.logger = logger
    }

    // swift-service-lifecycle logs its services: say what this one is, and nothing of the
    // configuration it holds.
    package var description: String { "RenewalSweep(queue: \(queue), interval: \(interval))" }

    package func run() async throws {
        await everyRound(of: interval, logger: logger, failure: "renewal sweep failed") { try await sweep() }
    }

    /// Enqueues a check for each subscription due now, `page` at a time and at most
    /// `pages` pages a round (the rest wait for the next); returns how many were due.
    @discardableResult
    package func sweep(page: Int = 500, pages: Int = 20) async throws -> Int {
        let now = try await service.configuration.clock.now()
        let cutoff = AppleTimestamp(now).milliseconds
        var found = 0
        for index in 0..<pages {
            let due = try await service.store.dueRenewalChecks(cutoffMs: cutoff, offset: index * page, limit: page)
            found += due.count
            let requests = try due.map { entry in
                let check = JobPayloads.RenewalCheck(publisher: entry.publisher, originalTransactionId: entry.originalTransactionId)
                return try EnqueueRequest(
                    type: EntitlementJobType.renewalCheck.rawValue, payload: JobPayloads.encode(check), queue: queue,
                    idempotencyKey: check.key(dueMs: entry.dueMs))
            }
            if !requests.isEmpty {
                let created = try await service.jobQueue.enqueue(batch: requests).filter(\.created).count
                if created > 0 { logger.debug("renewal sweep enqueued checks", metadata: ["count": "\(created)"]) }
            }
            if due.count < page { break }
        }
        return found
    }
}
