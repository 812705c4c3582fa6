import DurationUnits
import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

@testable import JobQueue

@Suite struct EnqueueTests {
    @Test func enqueueWritesTheEnvelopeAndPendingList() async throws {
        let h = try await QueueHarness("enqueue")
        let before = JobQueueNow.milliseconds
        let id = try await h.enqueue("noop", payload: #"{"sleepMs":1}"#, maxAttempts: 3)
        let job = try #require(try await h.job(id))
        #expect(job.id == id)
        #expect(job.type == "noop")
        #expect(job.queue == h.name)
        #expect(job.payload == #"{"sleepMs":1}"#)
        #expect(job.status == .queued)
        #expect(job.attempt == 0)
        #expect(job.maxAttempts == 3)
        #expect(job.createdAt >= before && job.enqueuedAt == job.createdAt)
        #expect(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) == [id])
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.pending == 1)
        #expect(stats.counters["enqueued:noop"] == 1)
        #expect(try await h.queue.knownQueues().contains(h.name))
    }

    @Test func idempotentEnqueueUnderConcurrencyMakesOneJob() async throws {
        let h = try await QueueHarness("idem")
        let results = try await withThrowingTaskGroup(of: EnqueueResult.self) { group in
            for _ in 0..<50 { group.addTask { try await h.queue.enqueue(h.request(idempotencyKey: "purchase-42")) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(results.map(\.id)).count == 1)
        #expect(results.filter(\.created).count == 1)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 1)
        let ttl = try await h.redis.send(["PTTL", h.keys.idempotency("purchase-42")]).int ?? -1
        #expect(ttl > 0 && ttl <= 86_400_000)
    }

    @Test func aUniqueKeyIsRefusedWhileItsHolderIsUnfinishedAndFreedAfter() async throws {
        let h = try await QueueHarness("unique")
        func request(_ payload: String, idempotencyKey: String? = nil) -> EnqueueRequest {
            var request = h.request(payload: payload, idempotencyKey: idempotencyKey)
            request.uniqueKey = "tx-1"
            return request
        }
        let first = try await h.queue.enqueue(request(#"{"n":1}"#, idempotencyKey: "exact-1"))
        #expect(first.outcome == .created)
        // A different request about the same thing while the first is queued: refused, naming the holder.
        let second = try await h.queue.enqueue(request(#"{"n":2}"#, idempotencyKey: "exact-2"))
        #expect(second == EnqueueResult(id: first.id, outcome: .conflict))
        #expect(try await h.redis.send(["EXISTS", h.keys.idempotency("exact-2")]).int == 0)
        // The exact repeat still gets its own job back (idempotency comes first).
        #expect(
            try await h.queue.enqueue(request(#"{"n":1}"#, idempotencyKey: "exact-1")) == EnqueueResult(id: first.id, outcome: .existing))
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 1)
        // Once the holder has finished, the key is free.
        let done = try await h.whileRunning(h.worker()) { try await h.waitForStatus(first.id, .succeeded) }
        #expect(done.status == .succeeded)
        let third = try await h.queue.enqueue(request(#"{"n":3}"#))
        #expect(third.outcome == .created && third.id != first.id)
        // The recent list names both created jobs, newest first; the refused one never existed.
        #expect(try await h.queue.recentJobs(queue: h.name).map(\.id) == [third.id, first.id])
    }

    /// A job names its unique key (`unique`) while it is unfinished, and lets go of the key when
    /// it ends, succeeded or dead: the key no longer outlives it by the idempotency TTL. A key
    /// that names another job by then is left alone, and so is the key of a job enqueued
    /// without the field (an older `enqueue.lua`), which its TTL ends as before.
    @Test func aJobThatEndsDeletesItsUniqueKey() async throws {
        let h = try await QueueHarness("unique-end")
        func enqueue(_ unique: String, _ payload: String, maxAttempts: Int = 0) async throws -> String {
            var request = h.request(payload: payload, maxAttempts: maxAttempts)
            request.uniqueKey = unique
            let result = try await h.queue.enqueue(request)
            try #require(result.outcome == .created)
            return result.id
        }
        func held(_ unique: String) async throws -> String? { try await h.redis.send(["GET", h.keys.unique(unique)]).string }
        func field(_ id: String, _ name: String) async throws -> String? {
            try await h.redis.send(["HGET", h.keys.job(id), name]).string
        }
        let succeeds = try await enqueue("tx-ok", #"{"failTimes":1}"#)
        let dies = try await enqueue("tx-dead", #"{"sleepMs":"x"}"#)
        let overtaken = try await enqueue("tx-other", "{}")
        let older = try await enqueue("tx-older", "{}")
        // Its only attempt spent by workers that were lost: it goes dead as it is claimed.
        let lost = try await enqueue("tx-lost", "{}", maxAttempts: 1)
        _ = try await h.redis.send(["HSET", h.keys.job(lost), "attempt", "1"])
        let named = try await field(succeeds, "unique")
        #expect(named == "tx-ok")
        #expect(try await held("tx-ok") == succeeds)
        // The key expired and another job took it meanwhile; an older producer's record.
        _ = try await h.redis.send(["SET", h.keys.unique("tx-other"), "another-job"])
        _ = try await h.redis.send(["HDEL", h.keys.job(older), "unique"])

        try await h.whileRunning(h.worker()) {
            for id in [succeeds, overtaken, older] { _ = try await h.waitForStatus(id, .succeeded) }
            _ = try await h.waitForStatus(dies, .failed)
            _ = try await h.waitForStatus(lost, .failed)
        }
        #expect(try await job(succeeds, in: h).attempt == 2, "a retry kept the key, and the end freed it")
        let (okKey, okField) = (try await held("tx-ok"), try await field(succeeds, "unique"))
        #expect(okKey == nil && okField == nil, "a succeeded job keeps no input")
        let (deadKey, deadField) = (try await held("tx-dead"), try await field(dies, "unique"))
        #expect(deadKey == nil && deadField == "tx-dead", "a dead job keeps everything")
        #expect(try await held("tx-other") == "another-job")
        #expect(try await held("tx-older") == older)
        #expect(try await held("tx-lost") == nil, "a job dead because its workers were lost lets go too")
        // Whichever way the key went, a new job about the same thing is created.
        for unique in ["tx-ok", "tx-older", "tx-lost"] { _ = try await enqueue(unique, "{}") }
        // A dead job retried by hand holds its key again, for the idempotency TTL.
        #expect(try await h.queue.retryDead(queue: h.name, ids: [dies]) == 1)
        #expect(try await held("tx-dead") == dies)
        let ttl = try await h.redis.send(["PTTL", h.keys.unique("tx-dead")]).int ?? -1
        #expect(ttl > 0 && ttl <= 86_400_000)
        var again = h.request(payload: "{}")
        again.uniqueKey = "tx-dead"
        #expect(try await h.queue.enqueue(again) == EnqueueResult(id: dies, outcome: .conflict))
    }

    private func job(_ id: String, in h: QueueHarness) async throws -> JobRecord { try #require(try await h.job(id)) }

    /// Most unique keys are new (a purchase posted once): such an enqueue is one script call
    /// and nothing else. A held key takes a second call, naming the holder the first returned.
    /// Counted on a private server, where no other test's commands mix in.
    @Test func aNewUniqueKeyCostsOneCallAndAHeldOneTwo() async throws {
        let server = try await LocalRedisServer(logger: TestRedis.logger)
        do {
            let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: server.url), logger: TestRedis.logger)
            let queue = JobQueue(redis: pool, configuration: JobQueueConfiguration(prefix: "calls"), logger: TestRedis.logger)
            func request(_ unique: String, _ payload: String) -> EnqueueRequest {
                var request = EnqueueRequest(type: "noop", payload: payload, queue: "q")
                request.uniqueKey = unique
                return request
            }
            _ = try await queue.enqueue(request("warm-up", "{}"))
            func calls() async throws -> [String: Int] {
                let text = try await pool.send(["INFO", "commandstats"]).string ?? ""
                var calls: [String: Int] = [:]
                for line in text.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_") {
                    let name = line.dropFirst("cmdstat_".count).prefix { $0 != ":" }
                    // cmdstat_get:calls=50,usec=...,rejected_calls=0,failed_calls=0
                    let count = line.split(separator: ":calls=").dropFirst().first?.prefix { $0.isNumber } ?? ""
                    calls[String(name)] = Int(count)
                }
                return calls
            }
            _ = try await pool.send(["CONFIG", "RESETSTAT"])
            let created = try await queue.enqueue(batch: (0..<50).map { request("tx-\($0)", #"{"n":\#($0)}"#) })
            #expect(created.allSatisfy { $0.outcome == .created })
            let afterNew = try await calls()
            #expect(afterNew["evalsha"] == 1, "one script call for 50 new keys: \(afterNew)")
            #expect(afterNew["get"] == 50, "the keys are read inside the script only: \(afterNew)")

            _ = try await pool.send(["CONFIG", "RESETSTAT"])
            let held = try await queue.enqueue(request("tx-7", #"{"n":"again"}"#))
            #expect(held == EnqueueResult(id: created[7].id, outcome: .conflict))
            let afterHeld = try await calls()
            #expect(afterHeld["evalsha"] == 2, "a held key: the call, then the call naming its holder: \(afterHeld)")
            pool.close()
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test func theBatcherSharesRoundTripsButAnswersEachCallerAlone() async throws {
        let h = try await QueueHarness("batcher")
        let batcher = EnqueueBatcher(jobQueue: h.queue, maximumConcurrentFlushes: 2, maximumBatch: 16)
        // 300 callers at once: 100 pairs that share an idempotency key, 99 distinct, 1 invalid.
        let outcomes = await withTaskGroup(of: (Int, Result<EnqueueResult, any Error>).self) { group in
            for index in 0..<300 {
                group.addTask {
                    var request = h.request(payload: index < 200 ? #"{"pair":\#(index / 2)}"# : #"{"n":\#(index)}"#)
                    if index < 200 { request.idempotencyKey = "pair-\(index / 2)" }
                    if index == 299 { request.payload = "{not json" }
                    do { return (index, .success(try await batcher.enqueue(request))) } catch { return (index, .failure(error)) }
                }
            }
            return await group.reduce(into: [Int: Result<EnqueueResult, any Error>]()) { $0[$1.0] = $1.1 }
        }
        var results: [Int: EnqueueResult] = [:]
        for (index, outcome) in outcomes {
            switch outcome {
            case .success(let result): results[index] = result
            case .failure(let error): #expect(index == 299 && (error as? JobQueueError)?.code == .invalidJob, "\(index): \(error)")
            }
        }
        #expect(results.count == 299)
        for pair in 0..<100 {
            let (a, b) = (try #require(results[pair * 2]), try #require(results[pair * 2 + 1]))
            #expect(a.id == b.id && [a.created, b.created].filter { $0 }.count == 1)
        }
        #expect(Set(results.values.map(\.id)).count == 199)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 199)
    }

    @Test func bulkEnqueueMakesDistinctJobsInOrder() async throws {
        let h = try await QueueHarness("bulk")
        let requests = (0..<1234).map { h.request(payload: #"{"n":\#($0)}"#) }
        let results = try await h.queue.enqueue(batch: requests)
        #expect(results.count == 1234)
        #expect(Set(results.map(\.id)).count == 1234)
        #expect(results.allSatisfy { $0.created })
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 1234)
        // FIFO: the first enqueued is the next to be taken (the right end).
        #expect(try await h.redis.send(["LINDEX", h.keys.pending, "-1"]).string == results[0].id)
    }

    /// Today's script asks whether a call's ids exist with one `EXISTS` per thousand and
    /// pushes its ids onto the lists a thousand at a time. The reference is the second
    /// format's script (frozen), which asks and pushes job by job: the same calls must leave
    /// the same lists, counters and answers. The calls: 2,500 new ids (every push and the
    /// recent list's 1,500 over a thousand); 1,500 whose 1,500th exists already (found by the
    /// second `EXISTS`); 302 with an id twice and one that exists (asked job by job).
    @Test func aCallsBulkPushesLeaveWhatJobByJobPushesLeave() async throws {
        let today = try await QueueHarness("bulk-push")
        let reference = try await QueueHarness("bulk-push-reference")
        let now = JobQueueNow.milliseconds
        func jobs(_ range: Range<Int>) -> [(id: String, runAt: Int64)] {
            range.map { n in ("job-\(n)", n % 3 == 1 ? now + 60_000 + Int64(n % 50) : 0) }
        }
        func call(_ h: QueueHarness, _ script: RedisScript, _ jobs: [(id: String, runAt: Int64)]) async throws -> [RedisReply] {
            let keys =
                [h.keys.pending, h.keys.scheduled, h.keys.stats, h.keys.recent]
                + jobs.flatMap { Array(repeating: h.keys.job($0.id), count: 4) }
            let arguments =
                [String(now), "86400000", h.name, "1500"]
                + jobs.flatMap { [$0.id, "noop", "{}", "0", String($0.runAt), "", "", "", ""] }
            return try #require(try await h.redis.run(script, keys: keys, arguments: arguments).array)
        }
        func state(_ h: QueueHarness) async throws -> [[String]] {
            try await h.redis.pipeline([
                ["LRANGE", h.keys.pending, "0", "-1"], ["ZRANGE", h.keys.scheduled, "0", "-1", "WITHSCORES"],
                ["LRANGE", h.keys.recent, "0", "-1"], ["HGETALL", h.keys.stats],
            ]).map { $0.array?.compactMap(\.string) ?? [] }
        }
        var second = jobs(2_500..<3_999)
        second.insert(("job-100", 0), at: 1_499)  // made by the first call
        var third = jobs(4_000..<4_300)
        third.insert(("job-4150", 0), at: 200)  // twice in one call: the first makes it
        third.insert(("job-7", 0), at: 20)  // made by the first call
        let calls = [jobs(0..<2_500), second, third]
        var answers: [[RedisReply]] = []
        for (h, script) in [(today, QueueScripts.enqueue), (reference, QueueScripts.enqueueSecondFormat)] {
            var replies: [RedisReply] = []
            for jobs in calls { replies += try await call(h, script, jobs) }
            answers.append(replies)
        }
        #expect(answers[0] == answers[1])
        let made = try await state(today)
        #expect(made == (try await state(reference)))
        let created = stride(from: 1, to: answers[0].count, by: 2).filter { answers[0][$0] == .integer(1) }.count
        #expect(created == 2_500 + 1_499 + 300)
        #expect(made[0].count + made[1].count / 2 == created)
        #expect(made[2].count == 1_500 && made[2].first == "job-4299")
    }

    /// An id's characters are its random bits six at a time: all zero bits make "A"s; each
    /// one of the 132 bits set alone changes exactly its own character, by its own weight;
    /// and 20,000 ids from the system's source are all different, 22 characters each.
    @Test func anIdIsItsRandomBitsSixAtATime() {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        let zero = [UInt8](repeating: 0, count: JobQueue.idBytes)
        #expect(JobQueue.ids(from: zero) == [String(repeating: "A", count: 22)])
        for bit in 0..<132 {
            var bytes = zero
            bytes[bit / 8] = 1 << (bit % 8)
            let id = Array(JobQueue.ids(from: bytes)[0].utf8)
            let weight = 1 << (bit % 6)
            var expected = [UInt8](repeating: UInt8(ascii: "A"), count: 22)
            expected[bit / 6] = alphabet[bit / 6 == 0 ? weight % 62 : weight]
            #expect(id == expected, "bit \(bit)")
        }
        // Two ids from 34 bytes, the second from the second 17.
        let pair = JobQueue.ids(from: zero + [UInt8](repeating: 0xFF, count: JobQueue.idBytes))
        #expect(pair == [String(repeating: "A", count: 22), "B" + String(repeating: "_", count: 21)])
        let ids = JobQueue.makeIDs(20_000)
        #expect(Set(ids).count == 20_000 && ids.allSatisfy { $0.utf8.count == 22 })
        #expect(JobQueue.makeID().utf8.count == 22)
    }

    /// A key of another type than the script reads or writes is refused before anything is
    /// written: a queue's list, or a job's idempotency key. Otherwise the call would stop part
    /// way, with the jobs before it written and their ids pushed nowhere.
    @Test func aCallIsRefusedWholeWhenAKeyHoldsAnotherType() async throws {
        let h = try await QueueHarness("bulk-wrong-type")
        var named = h.request()
        named.id = "typed-one"
        try await h.redis.send(["SET", h.keys.recent, "not a list"])
        let error = try await #require(throws: (any Error).self) { try await h.queue.enqueue(batch: [named, h.request()]) }
        #expect("\(error)".contains("holds a string, not a list"), "\(error)")
        try await h.redis.send(["DEL", h.keys.recent])
        try await h.redis.send(["HSET", h.keys.idempotency("taken"), "field", "value"])
        let second = try await #require(throws: (any Error).self) {
            try await h.queue.enqueue(batch: [named, h.request(idempotencyKey: "taken")])
        }
        #expect("\(second)".contains("holds a hash, not a string"), "\(second)")
        #expect(try await h.job("typed-one") == nil)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 0)
    }

    @Test func bulkWithARepeatedKeyReturnsTheFirstJob() async throws {
        let h = try await QueueHarness("bulkidem")
        let results = try await h.queue.enqueue(batch: [h.request(idempotencyKey: "k"), h.request(), h.request(idempotencyKey: "k")])
        #expect(results[0].created && results[1].created && !results[2].created)
        #expect(results[2].id == results[0].id)
    }

    @Test func delayedJobsWaitInTheScheduledSetUntilDue() async throws {
        let h = try await QueueHarness("delay")
        let before = JobQueueNow.milliseconds
        let id = try await h.queue.enqueue(h.request(delay: .seconds(60))).id
        let after = JobQueueNow.milliseconds
        #expect(try await h.job(id)?.status == .scheduled)
        let due = try #require(try await h.redis.send(["ZSCORE", h.keys.scheduled, id]).int)
        #expect(due >= before + 60_000 && due <= after + 60_000)
        #expect(try await h.job(id)?.enqueuedAt == Int64(due))
        #expect(try await h.queue.promoteDueJobs(queue: h.name) == 0)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 0)
        // Its time comes (moved rather than waited for).
        try await h.redis.send(["ZADD", h.keys.scheduled, "XX", String(JobQueueNow.milliseconds - 1), id])
        #expect(try await h.queue.promoteDueJobs(queue: h.name) == 1)
        #expect(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) == [id])
        #expect(try await h.redis.send(["ZCARD", h.keys.scheduled]).int == 0)
    }

    /// The tenth value per job (a W3C traceparent) is stored only when given; producers that
    /// send nine still work; any other count is refused whole.
    @Test func aTraceparentIsKeptWhenGivenAndNineValueProducersStillWork() async throws {
        let h = try await QueueHarness("traceparent")
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        var traced = h.request()
        traced.traceparent = traceparent
        let tracedId = try await h.queue.enqueue(traced).id
        #expect(try await h.job(tracedId)?.traceparent == traceparent)
        let plainId = try await h.queue.enqueue(h.request()).id
        #expect(try await h.job(plainId)?.traceparent == nil)
        #expect(try await h.redis.send(["HEXISTS", h.keys.job(plainId), "traceparent"]).int == 0)
        var bad = h.request()
        bad.traceparent = "00-not-a-trace"
        #expect(throws: JobQueueError.self) { try bad.validate() }

        // By hand, as another language's producer: two jobs of nine values, then two of ten.
        func call(_ perJob: [[String]]) async throws -> RedisReply {
            let keys =
                [h.keys.pending, h.keys.scheduled, h.keys.stats, h.keys.recent]
                + perJob.flatMap { job in
                    Array(repeating: h.keys.job(job[0]), count: 4)
                }
            let arguments = [String(JobQueueNow.milliseconds), "86400000", h.name, "0"] + perJob.flatMap { $0 }
            return try await h.redis.send(["EVAL", QueueScripts.enqueue.source, String(keys.count)] + keys + arguments)
        }
        func job(_ id: String, _ extra: [String]) -> [String] { [id, "noop", "{}", "0", "0", "", "", "", ""] + extra }
        #expect(try await call([job("nine-a", []), job("nine-b", [])]).array?.count == 4)
        #expect(try await call([job("ten-a", [traceparent]), job("ten-b", [""])]).array?.count == 4)
        #expect(try await h.job("nine-a")?.traceparent == nil)
        #expect(try await h.job("nine-b")?.status == .queued)
        #expect(try await h.job("ten-a")?.traceparent == traceparent)
        #expect(try await h.job("ten-b")?.traceparent == nil)
        // Nine and ten in one call cannot be told apart: refused, nothing made.
        await #expect(throws: (any Error).self) { try await call([job("mixed-a", []), job("mixed-b", [traceparent])]) }
        #expect(try await h.job("mixed-a") == nil)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 6)
    }

    @Test(arguments: [
        EnqueueRequest(type: "", queue: "q"),
        EnqueueRequest(type: "bad type", queue: "q"),
        EnqueueRequest(type: "noop", queue: "{q}"),
        EnqueueRequest(type: "noop", queue: "a:b"),
        EnqueueRequest(type: "noop", payload: "{not json", queue: "q"),
        EnqueueRequest(type: "noop", queue: "q", idempotencyKey: ""),
        EnqueueRequest(type: "noop", queue: "q", delay: .seconds(-1)),
        EnqueueRequest(type: "noop", queue: "q", maxAttempts: -1),
    ])
    func badRequestsAreRefusedAndNothingIsQueued(_ bad: EnqueueRequest) async throws {
        let h = try await QueueHarness("bad")
        var good = h.request()
        good.id = "good-one"
        var bad = bad
        if bad.queue == "q" { bad.queue = h.name }
        let error = try await #require(throws: JobQueueError.self) { try await h.queue.enqueue(batch: [good, bad]) }
        #expect(error.code == .invalidJob)
        #expect(!error.message.isEmpty)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 0)
        #expect(try await h.job("good-one") == nil)
    }
}

enum JobQueueNow {
    static var milliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
