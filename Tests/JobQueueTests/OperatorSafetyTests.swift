import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// Operators' and shutdown's moves touch only what they name: purging a live job's id
/// deletes nothing, and giving back a claimed job refunds an attempt only if it was spent.
@Suite struct OperatorSafetyTests {
    @Test func purgingTheIdOfALiveJobDeletesNothing() async throws {
        let h = try await QueueHarness("purge-live")
        let id = try await h.enqueue("noop")
        #expect(try await h.queue.purgeDead(queue: h.name, ids: [id]) == 0)
        let job = try #require(try await h.job(id), "the live job is still there")
        #expect(job.status == .queued)
        #expect(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) == [id])
    }

    /// A dead job's record expired while its id was still in the dead set (trimmed later), and a
    /// job was enqueued again with the same id (a notification's, a renewal check's): trimming,
    /// purging or retrying the dead entry leaves the new job alone.
    @Test func aDeadIdEnqueuedAgainIsNotTheDeadJob() async throws {
        let h = try await QueueHarness("dead-again")
        func enqueueFixed() async throws -> EnqueueResult {
            try await h.queue.enqueue(
                EnqueueRequest(type: "noop", payload: #"{"failTimes":5}"#, queue: h.name, maxAttempts: 1, id: "fixed-id"))
        }
        #expect(try await enqueueFixed().created)
        _ = try await h.whileRunning(h.worker()) { try await h.waitForStatus("fixed-id", .failed) }
        #expect(try await h.redis.send(["ZSCORE", h.keys.dead, "fixed-id"]).string != nil)
        // The dead record expires (its TTL), its id stays in the dead set until the next trim.
        try await h.redis.send(["DEL", h.keys.job("fixed-id")])
        #expect(try await enqueueFixed().created, "the id is free again")
        for operation in ["retry", "purge"] {
            try await h.redis.send(["ZADD", h.keys.dead, "1", "fixed-id"])
            let done =
                operation == "retry"
                ? try await h.queue.retryDead(queue: h.name, ids: ["fixed-id"])
                : try await h.queue.purgeDead(queue: h.name, ids: ["fixed-id"])
            #expect(done == (operation == "retry" ? 0 : 1), "\(operation): \(done)")
            let record = try #require(try await h.job("fixed-id"), "\(operation) left the new job's record")
            #expect(record.status == .queued && record.attempt == 0)
            #expect(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.count == 1, "queued once, not twice")
        }
        #expect(try await h.redis.send(["ZSCORE", h.keys.dead, "fixed-id"]).string == nil)
    }

    @Test func givingBackRefundsOnlyAnAttemptThatWasSpent() async throws {
        let h = try await QueueHarness("give-back")
        let consumer = "host:1:\(h.name):test"
        // One job moved by BLMOVE but never started (after two earlier attempts), one started.
        let claimed = try await h.enqueue("noop")
        let started = try await h.enqueue("noop")
        try await h.redis.send(["HSET", h.keys.job(claimed), "attempt", "2", "status", "queued"])
        try await h.redis.send(["HSET", h.keys.job(started), "attempt", "3", "status", "processing", "lease", "x"])
        for id in [claimed, started] {
            try await h.redis.send(["LREM", h.keys.pending, "0", id])
            try await h.redis.send(["LPUSH", h.keys.active(consumer), id])
        }
        #expect(try await h.queue.release(consumer: consumer, queue: h.name, onlyIfExpired: false) == 2)
        #expect(try await h.job(claimed)?.attempt == 2, "never started: nothing to give back")
        #expect(try await h.job(started)?.attempt == 2, "started: its attempt is given back")
        #expect(try await h.job(started)?.status == .queued)
        #expect(Set(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) ?? []) == [claimed, started])
    }
}
