import EntitleCore
import EntitlementJobs
import Foundation
import JobQueue
import RedisTestSupport
import Synchronization
import Testing

/// Apple's word about a purchase (a refund) reaches whoever holds it once the job holds the
/// purchase's lock, not whoever held it when the job started: a transfer that ran to its end
/// just before the lock was taken moved it, and the new holder must lose it.
@Suite struct HolderRaceTests {
    /// The transfer to make before a job of `type` takes its lock, made once.
    final class Race: Sendable {
        struct Move: Sendable {
            var api: APIStack
            var type: EntitlementJobType
            var original: String
            var from: String
            var to: String
        }
        private let armed = Mutex<Move?>(nil)
        let made = Mutex(false)

        func arm(_ move: Move) { armed.withLock { $0 = move } }

        /// The move, the first time a job of its type is about to take its locks.
        func take(for job: JobContext) -> Move? {
            armed.withLock { armed in
                guard let move = armed, job.type == move.type.rawValue else { return nil }
                armed = nil
                return move
            }
        }
    }

    /// Runs `body` with a stack whose worker makes the armed transfer just before the armed
    /// job type takes its lock (in another of the worker's slots, this job waiting).
    func withRace(_ name: String, _ body: @Sendable (APIStack, Race) async throws -> Void) async throws {
        let race = Race()
        try await APIStack.run(
            name, worker: true,
            service: { service in
                service.beforeTakingLocks = { job, _ in
                    guard let move = race.take(for: job) else { return }
                    let moved = try await move.api.transfer(move.original, to: move.to, from: move.from)
                    #expect(moved["newOwner"] as? String == move.to)
                    race.made.withLock { $0 = true }
                }
            }
        ) { api in try await body(api, race) }
    }

    /// A subscription ann holds; its transaction id and original transaction id.
    func bought(by customer: String, _ api: APIStack) async throws -> (id: String, original: String) {
        let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
        let claimed = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
        return (try #require(bought["transactionId"] as? String), try #require(bought["originalTransactionId"] as? String))
    }

    /// The V2 notification a control call made, posted as Apple would; its job's result.
    func forwarded(_ answer: [String: Any], _ api: APIStack) async throws -> [String: Any] {
        let uuid = try #require((answer["notificationUUID"] as? String) ?? (answer["notifications"] as? [String])?.first, "\(answer)")
        return try await api.forward(try await api.sentNotification(uuid))
    }

    @Test(.timeLimit(.minutes(3))) func aRefundRightAfterATransferReachesTheNewHolder() async throws {
        try await withRace("holder-race-refund") { api, race in
            let (ann, bob) = ("ann-race@example.com", "bob-race@example.com")
            let (id, original) = try await bought(by: ann, api)
            race.arm(.init(api: api, type: .refund, original: original, from: ann, to: bob))
            let notification = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund", "{}"), api)
            let refund = try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))

            #expect(race.made.withLock { $0 }, "the transfer ran before the refund took its lock")
            #expect(refund["customer"] as? String == bob, "\(refund)")
            #expect(try await !api.access(bob, "premium"), "the refund reached the purchase's holder")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aNotificationRightAfterATransferReachesTheNewHolder() async throws {
        try await withRace("holder-race-notification") { api, race in
            let (ann, bob) = ("ann-race@example.com", "bob-race@example.com")
            let (_, original) = try await bought(by: ann, api)
            race.arm(.init(api: api, type: .notification, original: original, from: ann, to: bob))
            let result = try await forwarded(
                try await api.simulator("/simulator/subscriptions/\(original)/auto-renew-off", "{}"), api)

            #expect(race.made.withLock { $0 }, "the transfer ran before the notification took its lock")
            #expect(result["customer"] as? String == bob, "\(result)")
            let subscriptions = try await api.customer(bob)["subscriptions"] as? [[String: Any]] ?? []
            let subscription = try #require(subscriptions.first { $0["originalTransactionId"] as? String == original }, "\(subscriptions)")
            #expect(subscription["autoRenew"] as? Bool == false, "Apple's news reached the purchase's holder: \(subscription)")
        }
    }
}
