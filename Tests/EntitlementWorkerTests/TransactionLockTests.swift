import EntitleCore
import Entitlements
import Foundation
import LocalProcesses
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

    /// On one server a claim's reads go in the round trip that takes the locks, after them:
    /// they read what the previous holder wrote before it let go. Where the client had to
    /// send an acquisition again (a server without the script cached answers NOSCRIPT after
    /// the reads beside it ran), or a lock was busy, the read is not given: the caller reads.
    /// On a cluster or behind Sentinel they are not sent.
    @Test func aClaimsReadsGoWithTheLocksOnOneServerAndNotOnAClusterOrSentinel() async throws {
        // A server of its own: the test empties its script cache.
        let server = try await LocalRedisServer(logger: TestRedis.logger)
        let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: server.url), logger: TestRedis.logger)
        let prefix = TestRedis.uniquePrefix("lock-read")
        let locks = TransactionLock(redis: pool, prefix: prefix, lease: .seconds(30))
        let store = EntitlementStore(redis: pool, prefix: prefix, logger: TestRedis.logger)
        let query = store.claimQuery(publisher: "p", originalTransactionIds: ["T2", "T1"], customer: "c")
        let held = try #require(try await locks.acquire(publisher: "p", originalTransactionId: "T2", job: "job-a"))
        let busy = try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "job-b", reading: query)
        #expect(Set(busy.tokens.keys) == ["T1"] && busy.read == nil, "T2 is job-a's")
        for token in busy.tokens.values { try await locks.release(publisher: "p", token: token, job: "job-b") }
        // job-a claims T2 for c, writes c and lets go.
        #expect(try await store.claim(publisher: "p", originalTransactionId: "T2", for: "c") == "c")
        try await store.update(publisher: "p", customer: "c", fence: held) { state in
            state.transactions["t2"] = PurchaseFact(
                transactionId: "t2", originalTransactionId: "T2", productId: "x", bundleId: "b", kind: .nonConsumable,
                environment: "Sandbox", purchaseDate: Date(timeIntervalSince1970: 1_790_000_000))
        }
        try await locks.release(publisher: "p", token: held, job: "job-a")
        let taken = try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "job-b", reading: query)
        #expect(Set(taken.tokens.keys) == ["T1", "T2"])
        let read = try #require(taken.read)
        #expect(read.owners == ["T2": "c"] && read.snapshot.version == 1 && read.snapshot.state.transactions.keys.sorted() == ["t2"])
        for token in taken.tokens.values { try await locks.release(publisher: "p", token: token, job: "job-b") }
        // The script cache emptied: the acquisitions come back NOSCRIPT after the reads ran, and
        // are sent again; the locks are taken, the read is not given.
        _ = try await pool.send(["SCRIPT", "FLUSH"])
        let resent = try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "job-c", reading: query)
        #expect(Set(resent.tokens.keys) == ["T1", "T2"] && resent.read == nil)
        for token in resent.tokens.values { try await locks.release(publisher: "p", token: token, job: "job-c") }
        #expect(try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "job-d", reading: query).read != nil)
        pool.close()
        await server.stop()

        // A cluster (a pipeline's parts for different servers run in no set order) and
        // Sentinel (a call a changing deployment refused is sent again on its own): the reads
        // are not sent with the locks, and the caller reads.
        func leftToTheCaller(_ url: String) async throws {
            let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: url), logger: TestRedis.logger)
            defer { pool.close() }
            let locks = TransactionLock(redis: pool, prefix: prefix, lease: .seconds(30))
            let store = EntitlementStore(redis: pool, prefix: prefix, logger: TestRedis.logger)
            #expect(try await store.claim(publisher: "p", originalTransactionId: "T2", for: "c") == "c")
            let query = store.claimQuery(publisher: "p", originalTransactionIds: ["T1", "T2"], customer: "c")
            // The script cached first: a NOSCRIPT would withhold the read anyway.
            for token in try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "warm-up").tokens.values {
                try await locks.release(publisher: "p", token: token, job: "warm-up")
            }
            let taken = try await locks.acquire(publisher: "p", originalTransactionIds: ["T1", "T2"], job: "job-b", reading: query)
            #expect(Set(taken.tokens.keys) == ["T1", "T2"])
            #expect(taken.read == nil, "left to the caller: \(url)")
            #expect(try await store.read(query).owners == ["T2": "c"])
        }
        let cluster = try await LocalRedisCluster.start(primaries: 3, replicas: 0)
        do {
            try await leftToTheCaller(cluster.url)
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
        let sentinel = try await LocalSentinelGroup.start(replicas: 1, sentinels: 1)
        do {
            try await leftToTheCaller(sentinel.url)
        } catch {
            await sentinel.stop()
            throw error
        }
        await sentinel.stop()
    }
}
