import EntitleCore
import EntitlementJobs
import Foundation
import RedisTestSupport
import Synchronization
import Testing

/// Apple's word about a purchase (a refund) reaches whoever holds it once the job holds the
/// purchase's lock, not whoever held it when the job started: a transfer that ran to its end
/// just before the lock was taken moved it, and the new holder must lose it.
@Suite struct HolderRaceTests {
    /// The transfer to make before the refund job takes its lock, made once.
    final class Race: Sendable {
        struct Move: Sendable {
            var api: APIStack
            var original: String
            var from: String
            var to: String
        }
        private let armed = Mutex<Move?>(nil)
        let made = Mutex(false)

        func arm(_ move: Move) { armed.withLock { $0 = move } }

        func take() -> Move? {
            armed.withLock { armed in
                defer { armed = nil }
                return armed
            }
        }
    }

    @Test(.timeLimit(.minutes(3))) func aRefundRightAfterATransferReachesTheNewHolder() async throws {
        let race = Race()
        try await APIStack.run(
            "holder-race", worker: true,
            service: { service in
                service.beforeTakingLocks = { job, _ in
                    guard job.type == EntitlementJobType.refund.rawValue, let move = race.take() else { return }
                    // The worker runs the transfer in another slot while this job waits here.
                    let moved = try await move.api.transfer(move.original, to: move.to, from: move.from)
                    #expect(moved["newOwner"] as? String == move.to)
                    race.made.withLock { $0 = true }
                }
            }
        ) { api in
            let (ann, bob) = ("ann-race@example.com", "bob-race@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let id = try #require(bought["transactionId"] as? String)
            let original = try #require(bought["originalTransactionId"] as? String)
            let claimed = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")

            race.arm(.init(api: api, original: original, from: ann, to: bob))
            let answer = try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            let uuid = try #require(
                (answer["notificationUUID"] as? String) ?? (answer["notifications"] as? [String])?.first, "\(answer)")
            let notification = try await api.forward(try await api.sentNotification(uuid))
            let refund = try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))

            #expect(race.made.withLock { $0 }, "the transfer ran before the refund took its lock")
            #expect(refund["customer"] as? String == bob, "\(refund)")
            #expect(try await !api.access(bob, "premium"), "the refund reached the purchase's holder")
            #expect(try await !api.access(ann, "premium"))
        }
    }
}
