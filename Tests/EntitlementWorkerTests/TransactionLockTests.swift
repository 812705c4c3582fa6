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

    /// The locks with the reads that follow them, in one round trip: the reads see the
    /// locks taken; a lock another job holds is not taken, and the reads come back all the same.
    @Test func locksTakenInOneRoundTripWithReadsThatFollowThem() async throws {
        let pool = try await TestRedis.pool()
        defer { pool.close() }
        let prefix = TestRedis.uniquePrefix("locks-reads")
        let locks = TransactionLock(redis: pool, prefix: prefix, lease: .seconds(30))
        let keys = EntitlementKeys(prefix: prefix)
        let reads = [["GET", keys.lock("p", "T1")], ["GET", keys.lock("p", "T2")]]
        let taken = try await locks.acquire(["T1", "T2"], publisher: "p", job: "job-a", then: reads)
        #expect(taken.error == nil)
        let t1 = try #require(taken.tokens["T1"])
        let t2 = try #require(taken.tokens["T2"])
        #expect(try taken.reads.map { try $0.get().string } == ["job-a:\(t1.value)", "job-a:\(t2.value)"])

        // Another job: T2 is job-a's, T3 free.
        let other = try await locks.acquire(
            ["T2", "T3"], publisher: "p", job: "job-b", then: [["GET", keys.lock("p", "T2")]])
        #expect(other.tokens["T2"] == nil)
        let t3 = try #require(other.tokens["T3"])
        #expect(try other.reads.map { try $0.get().string } == ["job-a:\(t2.value)"])
        #expect(try await locks.release([t1, t2], publisher: "p", job: "job-a", with: ClosingWrites()).isEmpty)
        #expect(try await locks.release([t3], publisher: "p", job: "job-b", with: ClosingWrites()).isEmpty)
        #expect(try await pool.send(["EXISTS", keys.lock("p", "T1"), keys.lock("p", "T2"), keys.lock("p", "T3")]) == .integer(0))
    }
}
