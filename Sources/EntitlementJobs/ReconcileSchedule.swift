import AppStore
import DurationUnits
import EntitleCore
import Foundation
import JobQueue
import Logging
import ServiceLifecycle

/// Queues each publisher's `reconcile` job once per its `reconcileIntervalSeconds` (an hour
/// unless set), on the App Store's clock. Every worker process runs one: the idempotency
/// key of the interval makes them agree, and the unique key keeps one reconcile of a
/// publisher at a time (they share the publisher's saved position).
package struct ReconcileSchedule: Service, CustomStringConvertible {
    let service: EntitlementService
    let queue: String
    /// How often to look whether an interval has begun.
    let tick: Duration
    let logger: Logger

    package init(service: EntitlementService, queue: String, tick: Duration, logger: Logger) {
        self.service = service
        self.queue = queue
        self.tick = tick
        self.logger = logger
    }

    package var description: String { "ReconcileSchedule(queue: \(queue), tick: \(tick))" }

    package func run() async throws {
        await everyRound(of: tick, logger: logger, failure: "reconcile schedule failed") { try await schedule() }
    }

    /// Queues the reconciles whose interval has begun; returns the publishers with a new job.
    @discardableResult
    package func schedule() async throws -> [String] {
        let now = try await service.configuration.clock.now()
        var started: [String] = []
        for publisher in service.configuration.catalog.publishers where publisher.reconcileIntervalSeconds > 0 {
            let gateways = service.configuration.gateways[publisher.id] ?? [:]
            guard gateways.values.contains(where: \.hasServerAPI) else { continue }
            let slot = Int64(now.timeIntervalSince1970) / Int64(publisher.reconcileIntervalSeconds)
            let result = try await service.jobQueue.enqueue(
                try EnqueueRequest(
                    JobPayloads.Reconcile(publisher: publisher.id), queue: queue,
                    idempotencyKey: "reconcile:\(publisher.id):\(publisher.reconcileIntervalSeconds):\(slot)",
                    uniqueKey: ReconcileSchedule.uniqueKey(publisher.id)))
            if result.created { started.append(publisher.id) }
        }
        if !started.isEmpty { logger.info("reconciles queued", metadata: ["publishers": "\(started)"]) }
        return started
    }

    /// One reconcile of a publisher at a time.
    package static func uniqueKey(_ publisher: String) -> String { "reconcile:\(publisher)" }
}
