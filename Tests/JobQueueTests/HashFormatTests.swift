import Foundation
import RedisClient
import RedisTestSupport
import Testing

@testable import JobQueue

/// The job's hash in its second format leaves out what its key or a default says; jobs
/// written in the first format (by a producer that still runs the older `enqueue.lua`, or
/// queued before an upgrade) run under today's workers and read the same.
@Suite struct HashFormatTests {
    /// The enqueue script of the first format, byte for byte as it was.
    static let firstFormatScript = String(
        decoding: (try? Data(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/enqueue-format1.lua")))
            ?? Data(),
        as: UTF8.self)

    /// Enqueues one job as a first-format producer does (plain EVAL of its script).
    func enqueueFirstFormat(
        _ h: QueueHarness, payload: String, maxAttempts: Int = 0, runAt: Int64 = 0, idempotencyKey: String = ""
    ) async throws -> String {
        let id = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let job = h.keys.job(id)
        let keys = [
            h.keys.pending, h.keys.scheduled, h.keys.stats, h.keys.recent, job,
            idempotencyKey.isEmpty ? job : h.keys.idempotency(idempotencyKey), job, job,
        ]
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let arguments = [
            String(now), "86400000", h.name, "200", id, "noop", payload, String(maxAttempts), String(runAt), idempotencyKey, "", "", "",
        ]
        let reply = try await h.redis.send(["EVAL", Self.firstFormatScript, String(keys.count)] + keys + arguments)
        try #require(reply.array?.last == .integer(1), "\(reply)")
        return id
    }

    @Test func jobsOfTheFirstFormatRunUnderTheSecondAndReadTheSame() async throws {
        try #require(Self.firstFormatScript.contains("'attempt', 0"), "the fixture is the first format's script")
        let h = try await QueueHarness("hash-format")
        try await h.redis.send(["SADD", "\(h.keys.prefix):queues", h.name])
        let retried = try await enqueueFirstFormat(h, payload: #"{"failTimes":1}"#, maxAttempts: 3, idempotencyKey: "first-\(UUID())")
        let long = try await enqueueFirstFormat(h, payload: #"{"pad":"\#(String(repeating: "x", count: 2_000))"}"#)
        let later = try await enqueueFirstFormat(h, payload: "{}", runAt: Int64(Date().timeIntervalSince1970 * 1000) + 300)
        func fields(_ id: String) async throws -> [String: String] {
            try await h.redis.send(["HGETALL", h.keys.job(id)]).fieldValues
        }
        let whole = try await fields(retried)
        #expect(whole["id"] == retried && whole["queue"] == h.name && whole["attempt"] == "0", "written whole")
        let before = try #require(try await h.job(later))
        #expect(before.status == .scheduled && before.enqueuedAt > before.createdAt)

        let (first, second, third) = try await h.whileRunning(h.worker()) {
            (
                try await h.waitForStatus(retried, .succeeded), try await h.waitForStatus(long, .succeeded),
                try await h.waitForStatus(later, .succeeded)
            )
        }
        #expect(first.attempt == 2 && first.maxAttempts == 3 && first.lastError?.hasPrefix("requestedFailure") == true, "\(first)")
        #expect(second.attempt == 1 && third.attempt == 1 && third.enqueuedAt == before.enqueuedAt)
        for record in [first, second, third] { #expect(record.queue == h.name && record.result?.hasPrefix(#"{"ok":true"#) == true) }
        // The long input's record was written afresh: in the second format, the same record.
        let rewritten = try await fields(long)
        #expect(rewritten["id"] == nil && rewritten["queue"] == nil && rewritten["maxAttempts"] == nil && rewritten["enqueuedAt"] == nil)
        #expect(rewritten["idempotencyKey"] == nil && rewritten["attempt"] == "1" && rewritten["createdAt"] != nil)
        #expect(second.id == long && second.enqueuedAt == second.createdAt)
    }

    /// What the second format saves on a queued job: the hash of the same job, both formats,
    /// measured by the server.
    @Test func aQueuedJobOfTheSecondFormatIsSmaller() async throws {
        let h = try await QueueHarness("hash-format-size")
        let old = try await enqueueFirstFormat(h, payload: "{}")
        let new = try await h.enqueue(payload: "{}")
        func bytes(_ id: String) async throws -> Int {
            try #require(try await h.redis.send(["MEMORY", "USAGE", h.keys.job(id), "SAMPLES", "0"]).int)
        }
        #expect(new.utf8.count == 22, "\(new)")
        let stored = try await h.redis.send(["HGETALL", h.keys.job(new)]).fieldValues
        #expect(Set(stored.keys) == ["type", "payload", "status", "createdAt"], "\(stored)")
        let (before, after) = (try await bytes(old), try await bytes(new))
        #expect(after + 64 <= before, "a queued no-op job: \(before) B in the first format, \(after) B in the second")
    }

    /// Entitle's own ids: 22 characters of A-Z a-z 0-9 - _, never one starting with "-" or "_"
    /// (a command line would take it for an option), and no two alike.
    @Test func ownIdsAreShortRandomAndSafeOnACommandLine() {
        let ids = (0..<20_000).map { _ in JobQueue.makeID() }
        #expect(Set(ids).count == ids.count)
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        #expect(ids.allSatisfy { $0.count == 22 && $0.allSatisfy(allowed.contains) })
        #expect(ids.allSatisfy { $0.first.map { $0.isLetter || $0.isNumber } == true })
        // Every symbol turns up in every later position: the bits are spread, not stuck.
        for position in [1, 11, 21] {
            #expect(Set(ids.map { Array($0)[position] }).count == 64, "position \(position)")
        }
    }

    /// During a rolling upgrade from a version that reads only the first format, new
    /// processes write it (`JobHashFormat.first`, `ENTITLE_JOB_FORMAT=1`): the older script,
    /// byte for byte, every field there.
    @Test func aQueueSetToTheFirstFormatWritesEveryField() async throws {
        #expect(QueueScripts.enqueueFirstFormat.source == Self.firstFormatScript)
        var configuration = JobQueueConfiguration()
        configuration.hashFormat = .first
        let h = try await QueueHarness("hash-format-first", configuration: configuration)
        let id = try await h.enqueue(payload: "{}")
        let stored = try await h.redis.send(["HGETALL", h.keys.job(id)]).fieldValues
        #expect(
            Set(stored.keys) == [
                "id", "type", "queue", "payload", "status", "attempt", "maxAttempts", "idempotencyKey", "createdAt", "enqueuedAt",
            ],
            "\(stored)")
        #expect(stored["id"] == id && stored["queue"] == h.name && stored["attempt"] == "0" && stored["enqueuedAt"] == stored["createdAt"])
    }

    /// The queue's oldest pending age reads `createdAt` where `enqueuedAt` is left out.
    @Test func theOldestPendingAgeOfASecondFormatJobIsItsWait() async throws {
        let h = try await QueueHarness("hash-format-age")
        let created = Date()
        _ = try await h.enqueue(payload: "{}")
        try await Task.sleep(for: .milliseconds(300))
        let age = try await h.queue.stats(queue: h.name).oldestPendingAgeSeconds
        #expect(age >= 0.25 && age <= Date().timeIntervalSince(created) + 1, "\(age)")
    }
}
