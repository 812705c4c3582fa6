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
