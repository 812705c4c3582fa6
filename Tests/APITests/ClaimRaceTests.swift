import EntitleCore
import EntitlementJobs
import Foundation
import RedisTestSupport
import Synchronization
import Testing

/// A purchase claimed by another customer between a receipt job's read and its write (every
/// claim is made under the purchase's lock, so only after the job's lease ran out and the
/// lock passed on; the fault point claims directly). Off a cluster the job's claim rides in
/// the customer's write, which must then write nothing at all; the job runs again and
/// decides on the holder it reads then.
@Suite struct ClaimRaceTests {
    /// The ids the fault point saw, and whether it has claimed them for someone else yet.
    final class Race: Sendable {
        let claimed = Mutex<[String]>([])
    }

    @Test(.timeLimit(.minutes(3))) func aPurchaseClaimedJustBeforeTheWriteIsNotGrantedToBoth() async throws {
        let race = Race()
        try await APIStack.run(
            "claim-race", worker: true,
            service: { service in
                let store = service.store
                service.beforeClaimingWrite = { _, ids in
                    let first = race.claimed.withLock { claimed in
                        guard claimed.isEmpty else { return false }
                        claimed = ids
                        return true
                    }
                    if first { _ = try await store.claim(publisher: "keep", originalTransactionIds: ids, for: "mallory@example.com") }
                }
            }
        ) { api in
            let bought = try await api.buy("premium.monthly", publisher: "keep")
            let jws = try #require(bought["signedTransaction"] as? String)
            let original = try #require(bought["originalTransactionId"] as? String)
            let result = try await api.claim(["customer": "ann@example.com", "signedTransaction": jws], token: APIStack.keepToken)

            // The claim was made meanwhile, and the job's write claimed nothing and granted nothing.
            #expect(race.claimed.withLock { $0 } == [original])
            #expect(result["accessGranted"] as? Bool == false, "\(result)")
            #expect(result["reason"] as? String == "ownedByAnotherCustomer", "\(result)")
            #expect((try await api.customer("ann@example.com", token: APIStack.keepToken)["entitlements"] as? [String] ?? []) == [])
            let store = EntitlementStore(redis: api.jobQueue.redis, prefix: api.jobQueue.configuration.prefix, logger: TestRedis.logger)
            #expect(try await store.owner(publisher: "keep", originalTransactionId: original) == "mallory@example.com")
            #expect(try await store.load(publisher: "keep", customer: "ann@example.com").version == 0, "nothing written for ann")

            // Ann's next purchase has nobody in the way: claimed and granted in its one write.
            let second = try await api.buy("premium.monthly", publisher: "keep")
            let granted = try await api.claim(
                ["customer": "ann@example.com", "signedTransaction": try #require(second["signedTransaction"] as? String)],
                token: APIStack.keepToken)
            #expect(granted["accessGranted"] as? Bool == true, "\(granted)")
            let secondOriginal = try #require(second["originalTransactionId"] as? String)
            #expect(try await store.owner(publisher: "keep", originalTransactionId: secondOriginal) == "ann@example.com")
        }
    }
}
