import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// A finished job keeps what is read, not its input; and once its long input is gone its
/// record takes the compact encoding again. Redis keeps a hash that ever held a long value
/// (over `hash-max-listpack-value`, 64 bytes by default) as a hashtable, about twice the
/// bytes of the listpack the same fields take when written afresh.
@Suite struct FinishedRecordTests {
    @Test func aJobThatHadALongInputIsKeptCompactOnceFinished() async throws {
        let h = try await QueueHarness("finished-record")
        let long = try await h.enqueue(payload: #"{"pad":"\#(String(repeating: "x", count: 4_000))"}"#)
        let short = try await h.enqueue(payload: #"{"pad":"x"}"#)
        func encoding(_ id: String) async throws -> String? { try await h.redis.send(["OBJECT", "ENCODING", h.keys.job(id)]).string }
        func bytes(_ id: String) async throws -> Int {
            try #require(try await h.redis.send(["MEMORY", "USAGE", h.keys.job(id), "SAMPLES", "0"]).int)
        }
        #expect(try await encoding(long) == "hashtable", "queued with its long input")
        let finished = try await h.whileRunning(h.worker()) {
            (try await h.waitForStatus(long, .succeeded), try await h.waitForStatus(short, .succeeded))
        }
        // What a poller reads is all there; the input is not.
        for record in [finished.0, finished.1] {
            #expect(record.result?.hasPrefix(#"{"ok":true"#) == true && record.finishedAt != nil && record.payload.isEmpty, "\(record)")
        }
        #expect(try await h.redis.send(["HEXISTS", h.keys.job(long), "payload"]).int == 0)
        #expect(try await h.redis.send(["PTTL", h.keys.job(long)]).int ?? -1 > 0, "kept for the result TTL")
        #expect(try await encoding(long) == "listpack")
        let (compact, plain) = (try await bytes(long), try await bytes(short))
        #expect(abs(compact - plain) < 64, "as small as a job that never had a long input: \(compact) B against \(plain) B")
    }
}
