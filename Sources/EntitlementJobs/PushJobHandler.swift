import AppStore
import EntitleCore
import Foundation
import JobQueue

/// `push`: finds a push's audience once (the customers holding the entitlement or offer
/// now, from the holder indexes, or the customers named) and fixes it in Redis, then queues
/// one `push-batch` job per `batchSize` customers, each under its own idempotency key: a
/// rerun after a crash queues no batch twice and splits the same audience the same way.
package struct PushJobHandler: EntitlementJobHandler {
    let service: EntitlementService
    var asksApple: Bool { false }

    /// Customers per batch job.
    package static let batchSize = 500

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var pushId: String
        package var audience: Int
        package var batches: Int
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Push.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        let pushes = service.store.pushes
        guard let record = try await pushes.record(publisher: publisher.id, id: payload.pushId) else {
            throw JobRefusal.notPossible(code: "unknownPush", "push \(payload.pushId) of \(publisher.id) is not kept (expired?)")
        }
        var customers: [String] = []
        if record.audienceSize == nil {
            let now = try await service.configuration.clock.now()
            let ms = AppleTimestamp(now).milliseconds
            // Those whose access has ended leave the index as they are passed over: it holds
            // the holders of now and later, not everyone who ever was one.
            switch record.request.audience {
            case .entitlement(let name):
                customers = try await service.store.holders(publisher: publisher.id, entitlement: name, after: ms)
                try await service.store.pruneHolders(publisher: publisher.id, entitlement: name, endedBy: ms)
            case .offer(let offer):
                customers = try await service.store.holders(publisher: publisher.id, offerId: offer, after: ms)
                try await service.store.pruneHolders(publisher: publisher.id, offerId: offer, endedBy: ms)
            case .customer(let customer): customers = [customer]
            case .customers(let list): customers = Array(Set(list)).sorted()
            }
        }
        let fixed = try await pushes.fixAudience(
            publisher: publisher.id, id: payload.pushId, customers: customers, batchSize: Self.batchSize)
        let requests = try (0..<fixed.batches).map { batch in
            let batchPayload = JobPayloads.PushBatch(publisher: publisher.id, pushId: payload.pushId, batch: batch)
            return try EnqueueRequest(batchPayload, queue: job.queue, idempotencyKey: batchPayload.idempotencyKey)
        }
        for start in stride(from: 0, to: requests.count, by: 1000) {
            _ = try await service.jobQueue.enqueue(batch: Array(requests[start..<min(start + 1000, requests.count)]))
        }
        return Result(pushId: payload.pushId, audience: fixed.size, batches: fixed.batches)
    }
}
