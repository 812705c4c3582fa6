import EntitleCore
import Entitlements
import Foundation
import RedisClient
import RedisTestSupport
import Testing

/// The per-transaction lock and its fencing token, on a real redis-server.
@Suite struct TransactionLockTests {
    @Test func oneJobAtATimeTheSameJobTakesItBackAndAStaleHolderCannotWrite() async throws {
        let pool = try await TestRedis.pool()
        let prefix = TestRedis.uniquePrefix("lock")
        let locks = TransactionLock(redis: pool, prefix: prefix, lease: .seconds(30))
        let first = try #require(try await locks.acquire(publisher: "p", originalTransactionId: "T1", job: "job-a"))
        #expect(try await locks.acquire(publisher: "p", originalTransactionId: "T1", job: "job-b") == nil, "busy for another job")
        #expect(try await locks.acquire(publisher: "p", originalTransactionId: "T2", job: "job-b") != nil, "other transactions are free")
        // The same job, reclaimed after its worker died, takes it back with a larger token.
        let again = try #require(try await locks.acquire(publisher: "p", originalTransactionId: "T1", job: "job-a"))
        #expect(again.value > first.value)
        // Releasing with the old token does nothing; with the current one it frees the lock.
        try await locks.release(publisher: "p", token: first, job: "job-a")
        #expect(try await locks.acquire(publisher: "p", originalTransactionId: "T1", job: "job-b") == nil)
        try await locks.release(publisher: "p", token: again, job: "job-a")
        let later = try #require(try await locks.acquire(publisher: "p", originalTransactionId: "T1", job: "job-b"))
        #expect(later.value > again.value)

        // Fencing: once the later holder wrote the customer, the earlier one cannot.
        let store = EntitlementStore(redis: pool, prefix: prefix, logger: TestRedis.logger)
        func add(_ id: String) -> (inout CustomerEntitlements) -> Void {
            { state in
                state.transactions[id] = PurchaseFact(
                    transactionId: id, originalTransactionId: "T1", productId: "x", bundleId: "b", kind: .nonConsumable,
                    environment: "Sandbox", purchaseDate: Date(timeIntervalSince1970: 1_790_000_000))
            }
        }
        try await store.update(publisher: "p", customer: "c", fence: later, add("1"))
        await #expect(throws: EntitlementStoreError.self) { try await store.update(publisher: "p", customer: "c", fence: again, add("2")) }
        #expect(try await store.load(publisher: "p", customer: "c").state.transactions.keys.sorted() == ["1"])
        try await store.update(publisher: "p", customer: "c", fence: later, add("3"))
        #expect(try await store.load(publisher: "p", customer: "c").version == 2)
        pool.close()
    }
}
