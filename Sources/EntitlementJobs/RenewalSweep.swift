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
///
/// Every worker process runs one. A sweep claims what it enqueues (`claimDueRenewalChecks`:
/// the entry's date moves on by `lease`), so one job is made per check whichever workers,
/// of whichever queues, sweep; a check that does not end (its job lost, dead after its
/// retries, or refused for good) is claimed again once the lease has passed, and never
/// holds back the checks due after it.
package struct RenewalSweep: Service, CustomStringConvertible {
    let service: EntitlementService
    let queue: String
    let interval: Duration
    let lease: Duration
    let logger: Logger

    package init(service: EntitlementService, queue: String, interval: Duration, lease: Duration = .seconds(3600), logger: Logger) {
        self.service = service
        self.queue = queue
        self.interval = interval
        self.lease = lease
        self.logger = logger
    }

    // swift-service-lifecycle logs its services: say what this one is, and nothing of the
    // configuration it holds.
    package var description: String { "RenewalSweep(queue: \(queue), interval: \(interval), lease: \(lease))" }

    package func run() async throws {
        await everyRound(of: interval, logger: logger, failure: "renewal sweep failed") { try await sweep() }
    }

    /// Claims and enqueues the checks due now, `page` at a time and at most `pages` pages a
    /// round (the rest wait for the next); returns how many it enqueued.
    @discardableResult
    package func sweep(page: Int = 500, pages: Int = 20) async throws -> Int {
        let now = try await service.configuration.clock.now()
        let cutoff = AppleTimestamp(now).milliseconds
        let leaseUntil = AppleTimestamp(now.addingTimeInterval(lease.seconds)).milliseconds
        var claimed = 0
        for _ in 0..<pages {
            let due = try await service.store.claimDueRenewalChecks(cutoffMs: cutoff, leaseUntilMs: leaseUntil, limit: page)
            guard !due.isEmpty else { break }
            do {
                let requests = try due.map { entry in
                    let check = JobPayloads.RenewalCheck(publisher: entry.publisher, originalTransactionId: entry.originalTransactionId)
                    return try EnqueueRequest(
                        type: EntitlementJobType.renewalCheck.rawValue, payload: JobPayloads.encode(check), queue: queue,
                        idempotencyKey: check.key(dueMs: entry.dueMs))
                }
                _ = try await service.jobQueue.enqueue(batch: requests)
            } catch {
                // Claimed but not queued: given back for the next round (a crash here instead
                // leaves them to their lease).
                try? await service.store.releaseRenewalChecks(due)
                throw error
            }
            claimed += due.count
            if due.count < page { break }
        }
        if claimed > 0 { logger.debug("renewal sweep enqueued checks", metadata: ["count": "\(claimed)"]) }
        return claimed
    }
}
