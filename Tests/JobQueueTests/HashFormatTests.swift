import Foundation
import RedisClient
import RedisTestSupport
import Testing

@testable import JobQueue

/// The job's hash in its second format leaves out what its key or a default says, and in its
/// third the status while queued; jobs written in an older format (by a producer that still
/// runs an older `enqueue.lua`, or queued before an upgrade) run under today's workers and
/// read the same.
@Suite struct HashFormatTests {
    /// An older format's enqueue script, byte for byte as it was.
    static func script(_ format: JobHashFormat) -> String {
        let file = "Fixtures/enqueue-format\(format.rawValue).lua"
        return String(
            decoding: (try? Data(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(file)))
                ?? Data(),
            as: UTF8.self)
    }
    static let firstFormatScript = script(.first)
    static let secondFormatScript = script(.second)

    /// Enqueues one job as a producer of an older format does (plain EVAL of its script).
    func enqueueOlder(
        _ h: QueueHarness, format: JobHashFormat = .first, payload: String, maxAttempts: Int = 0, runAt: Int64 = 0,
        idempotencyKey: String = ""
    ) async throws -> String {
        // An id as long as Entitle's own, so that sizes compare the fields alone.
        let id = JobQueue.makeID()
        let job = h.keys.job(id)
        let keys = [
            h.keys.pending, h.keys.scheduled, h.keys.stats, h.keys.recent, job,
            idempotencyKey.isEmpty ? job : h.keys.idempotency(idempotencyKey), job, job,
        ]
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let arguments = [
            String(now), "86400000", h.name, "200", id, "noop", payload, String(maxAttempts), String(runAt), idempotencyKey, "", "", "",
        ]
        let reply = try await h.redis.send(["EVAL", Self.script(format), String(keys.count)] + keys + arguments)
        try #require(reply.array?.last == .integer(1), "\(reply)")
        return id
    }

    @Test(arguments: [JobHashFormat.first, .second])
    func jobsOfAnOlderFormatRunUnderTodaysWorkersAndReadTheSame(_ format: JobHashFormat) async throws {
        try #require(Self.firstFormatScript.contains("'attempt', 0"), "the fixture is the first format's script")
        try #require(Self.secondFormatScript.contains("'status', 'queued'"), "the fixture is the second format's script")
        let h = try await QueueHarness("hash-format")
        try await h.redis.send(["SADD", "\(h.keys.prefix):queues", h.name])
        let retried = try await enqueueOlder(
            h, format: format, payload: #"{"failTimes":1}"#, maxAttempts: 3, idempotencyKey: "older-\(UUID())")
        let long = try await enqueueOlder(h, format: format, payload: #"{"pad":"\#(String(repeating: "x", count: 2_000))"}"#)
        let later = try await enqueueOlder(
            h, format: format, payload: "{}", runAt: Int64(Date().timeIntervalSince1970 * 1000) + 300)
        func fields(_ id: String) async throws -> [String: String] {
            try await h.redis.send(["HGETALL", h.keys.job(id)]).fieldValues
        }
        let whole = try await fields(retried)
        if format == .first {
            #expect(whole["id"] == retried && whole["queue"] == h.name && whole["attempt"] == "0", "written whole")
        } else {
            #expect(whole["id"] == nil && whole["attempt"] == nil && whole["status"] == "queued", "the second format")
        }
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

    /// What each format saves on a queued job: the hash of the same job in each, measured by
    /// the server.
    @Test func aQueuedJobOfEachLaterFormatIsSmaller() async throws {
        let h = try await QueueHarness("hash-format-size")
        let first = try await enqueueOlder(h, format: .first, payload: "{}")
        let second = try await enqueueOlder(h, format: .second, payload: "{}")
        let third = try await h.enqueue(payload: "{}")
        func bytes(_ id: String) async throws -> Int {
            try #require(try await h.redis.send(["MEMORY", "USAGE", h.keys.job(id), "SAMPLES", "0"]).int)
        }
        #expect(third.utf8.count == 22, "\(third)")
        #expect(
            Set(try await h.redis.send(["HGETALL", h.keys.job(second)]).fieldValues.keys) == ["type", "payload", "status", "createdAt"])
        let stored = try await h.redis.send(["HGETALL", h.keys.job(third)]).fieldValues
        #expect(Set(stored.keys) == ["type", "payload", "createdAt"], "\(stored)")
        let (sizeFirst, sizeSecond, sizeThird) = (try await bytes(first), try await bytes(second), try await bytes(third))
        #expect(sizeSecond + 64 <= sizeFirst, "a queued no-op job: \(sizeFirst) B in the first format, \(sizeSecond) B in the second")
        #expect(sizeThird + 16 <= sizeSecond, "a queued no-op job: \(sizeSecond) B in the second format, \(sizeThird) B in the third")
    }

    /// A queued job of the third format has no status: every reader takes it for `queued`, and
    /// tells it from a job that does not exist.
    @Test func aQueuedJobWithoutItsStatusIsQueuedToEveryReader() async throws {
        let h = try await QueueHarness("hash-format-third")
        var request = h.request("noop")
        request.uniqueKey = "third-\(UUID())"
        let held = try await h.queue.enqueue(request)
        #expect(held.outcome == .created)
        #expect(try await h.redis.send(["HEXISTS", h.keys.job(held.id), "status"]).int == 0)
        #expect(try await h.job(held.id)?.status == .queued)
        let missing = JobQueue.makeID()
        let outcomes = try await h.queue.outcomes(ids: [held.id, missing], queue: h.name)
        #expect(outcomes.map { $0?.status } == [.queued, nil])
        // The long-poll's mark: set on the queued job, nothing for one that does not exist.
        #expect(try await h.redis.run(QueueScripts.watch, keys: [h.keys.job(held.id)], arguments: []).string == "queued")
        #expect(try await h.redis.send(["HGET", h.keys.job(held.id), "waiter"]).string == "1")
        #expect(try await h.redis.run(QueueScripts.watch, keys: [h.keys.job(missing)], arguments: []).isNull)
        #expect(try await h.redis.send(["EXISTS", h.keys.job(missing)]).int == 0)
        // Its unique key stays held: a second job is refused while the first is queued.
        var again = h.request("noop")
        again.uniqueKey = request.uniqueKey
        #expect(try await h.queue.enqueue(again) == EnqueueResult(id: held.id, outcome: .conflict))
        // A hash without a type is no job (a late handler's memo after its record went): the
        // unique key it is named by is free.
        let ghost = JobQueue.makeID()
        try await h.redis.send(["HSET", h.keys.job(ghost), "memo:step", "1"])
        try await h.redis.send(["SET", h.keys.unique("ghost-\(ghost)"), ghost])
        var free = h.request("noop")
        free.uniqueKey = "ghost-\(ghost)"
        #expect(try await h.queue.enqueue(free).outcome == .created)
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

    /// A no-op job enqueued on a queue set to write `format`: the queue, its id and the hash
    /// stored.
    static func enqueued(in format: JobHashFormat, _ name: String) async throws -> (QueueHarness, String, [String: String]) {
        var configuration = JobQueueConfiguration()
        configuration.hashFormat = format
        let h = try await QueueHarness(name, configuration: configuration)
        let id = try await h.enqueue(payload: "{}")
        return (h, id, try await h.redis.send(["HGETALL", h.keys.job(id)]).fieldValues)
    }

    /// During a rolling upgrade from a version of the second format, new processes write it
    /// (`ENTITLE_JOB_FORMAT=2`): that script, byte for byte, and the status of a queued job.
    @Test func aQueueSetToTheSecondFormatWritesTheStatus() async throws {
        #expect(QueueScripts.enqueueSecondFormat.source == Self.secondFormatScript)
        let (_, _, stored) = try await Self.enqueued(in: .second, "hash-format-second")
        #expect(Set(stored.keys) == ["type", "payload", "status", "createdAt"] && stored["status"] == "queued", "\(stored)")
    }

    /// During a rolling upgrade from a version that reads only the first format, new
    /// processes write it (`JobHashFormat.first`, `ENTITLE_JOB_FORMAT=1`): the older script,
    /// byte for byte, every field there.
    @Test func aQueueSetToTheFirstFormatWritesEveryField() async throws {
        #expect(QueueScripts.enqueueFirstFormat.source == Self.firstFormatScript)
        let (h, id, stored) = try await Self.enqueued(in: .first, "hash-format-first")
        #expect(
            Set(stored.keys) == [
                "id", "type", "queue", "payload", "status", "attempt", "maxAttempts", "idempotencyKey", "createdAt", "enqueuedAt",
            ],
            "\(stored)")
        #expect(stored["id"] == id && stored["queue"] == h.name && stored["attempt"] == "0" && stored["enqueuedAt"] == stored["createdAt"])
    }

    /// The queue's oldest pending age reads `createdAt` where `enqueuedAt` is left out.
    @Test func theOldestPendingAgeOfAJobWithoutEnqueuedAtIsItsWait() async throws {
        let h = try await QueueHarness("hash-format-age")
        let created = Date()
        _ = try await h.enqueue(payload: "{}")
        try await Task.sleep(for: .milliseconds(300))
        let age = try await h.queue.stats(queue: h.name).oldestPendingAgeSeconds
        #expect(age >= 0.25 && age <= Date().timeIntervalSince(created) + 1, "\(age)")
    }
}
