import DurationUnits
import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// The queue's last races: acks whose reply was lost, bulk enqueues that fail part way,
/// and reapers after a long Redis pause.
@Suite struct QueueRaceTests {
    @Test func anAckSentAgainAfterItsReplyWasLostCountsAsRecordedNotFenced() async throws {
        let h = try await QueueHarness("ack-again")
        let id = try await h.enqueue()
        let consumer = "host:1:\(h.name):abc"
        try await h.redis.send(["LMOVE", h.keys.pending, h.keys.active(consumer), "RIGHT", "LEFT"])
        let started = try await h.redis.run(
            QueueScripts.start, keys: [h.keys.active(consumer), h.keys.dead, h.keys.stats, h.keys.job(id)],
            arguments: [String(JobQueueNow.milliseconds), "lease-1", "10", "60000", h.keys.finished, "1", "", id])
        #expect(started.array?.first?.string == id)
        let keys = [h.keys.active(consumer), h.keys.scheduled, h.keys.dead, h.keys.stats, h.keys.job(id)]
        let arguments = [String(JobQueueNow.milliseconds), "60000", "60000", h.keys.finished, id, "lease-1", "noop", "ok", "null", "0"]
        // The first call ran; its reply was lost; the batcher sends it again.
        #expect(try await h.redis.run(QueueScripts.finish, keys: keys, arguments: arguments).array == [.integer(1)])
        #expect(try await h.redis.run(QueueScripts.finish, keys: keys, arguments: arguments).array == [.integer(2)])
        // Counted once; another lease is still fenced off.
        #expect(try await h.queue.stats(queue: h.name).counters["succeeded:noop"] == 1)
        var other = arguments
        other[5] = "lease-2"
        #expect(try await h.redis.run(QueueScripts.finish, keys: keys, arguments: other).array == [.integer(0)])
    }

    /// A job claimed ahead of a slot on its last attempt waits claimed and marked with the
    /// claim's lease (`start`): an idle claim's `startClaimed` leaves it alone at the head of
    /// the active list; `startWaited` starts it only with that mark, once; a reaper takes
    /// the mark away, so the job claimed again is not started by the old claim's task.
    @Test func aJobLeftWaitingForItsSlotIsStartedOnlyByItsOwnClaimOnce() async throws {
        let h = try await QueueHarness("start-waited")
        let consumer = "host:1:\(h.name):waits"
        let active = h.keys.active(consumer)
        func start(_ id: String, lease: String) async throws -> [RedisReply] {
            try await h.redis.run(
                QueueScripts.start, keys: [active, h.keys.dead, h.keys.stats, h.keys.job(id)],
                arguments: [String(JobQueueNow.milliseconds), lease, "10", "60000", h.keys.finished, "0", "", id]
            ).array ?? []
        }
        func startWaited(_ id: String, mark: String, lease: String) async throws -> [RedisReply] {
            try await h.redis.run(
                QueueScripts.startWaited, keys: [active, h.keys.dead, h.keys.stats, h.keys.job(id)],
                arguments: [String(JobQueueNow.milliseconds), lease, "10", "60000", h.keys.finished, mark, id]
            ).array ?? []
        }
        func lease(_ id: String) async throws -> String? { try await h.redis.send(["HGET", h.keys.job(id), "lease"]).string }

        let id = try await h.enqueue(maxAttempts: 1)
        try await h.redis.send(["LMOVE", h.keys.pending, active, "RIGHT", "LEFT"])
        // No slot: left waiting, attempt 0 in the reply, marked, not started.
        let waiting = try await start(id, lease: "lease-1")
        #expect(waiting.count == 8 && waiting.first?.string == id && waiting[3].int == 0, "\(waiting)")
        #expect(try await lease(id) == "lease-1")
        var record = try #require(try await h.job(id))
        #expect(record.status == .queued && record.attempt == 0)
        // An idle claim whose BLMOVE timed out finds it at the head and leaves it alone.
        let (moved, claimed) = try await h.redis.makeDedicatedConnection(name: "waits-\(UUID().uuidString.prefix(8))").send(
            ["BLMOVE", h.keys.pending, active, "RIGHT", "LEFT", "0.1"],
            thenRun: QueueScripts.startClaimed, keys: [active, h.keys.dead, h.keys.stats],
            arguments: ["1", "lease-2", "10", "60000", h.keys.finished, h.keys.jobPrefix], timeout: .seconds(30))
        let claimedNothing = try claimed.get().array?.isEmpty ?? true
        #expect(moved == .null && claimedNothing)
        #expect(try await lease(id) == "lease-1")
        // Another claim's mark starts nothing; its own starts it once.
        #expect(try await startWaited(id, mark: "lease-2", lease: "lease-3").isEmpty)
        let started = try await startWaited(id, mark: "lease-1", lease: "lease-4")
        #expect(started.first?.string == id && started[3].int == 1, "\(started)")
        #expect(try await startWaited(id, mark: "lease-1", lease: "lease-5").isEmpty)
        record = try #require(try await h.job(id))
        #expect(record.status == .processing && record.attempt == 1)
        #expect(try await lease(id) == "lease-4")

        // Another job left waiting, then its consumer is lost and reaped: no attempt spent,
        // no mark left; claimed again, the old claim's task cannot start it.
        let second = try await h.enqueue(maxAttempts: 1)
        try await h.redis.send(["LMOVE", h.keys.pending, active, "RIGHT", "LEFT"])
        #expect(try await start(second, lease: "lease-6")[3].int == 0)
        try await h.redis.send(["ZADD", h.keys.consumers, "1", consumer])
        _ = try await h.queue.reapExpiredConsumers(queue: h.name)
        record = try #require(try await h.job(second))
        #expect(record.status == .queued && record.attempt == 0)
        #expect(try await lease(second) == nil)
        try await h.redis.send(["LMOVE", h.keys.pending, active, "RIGHT", "LEFT"])
        #expect(try await startWaited(second, mark: "lease-6", lease: "lease-7").isEmpty)
        #expect(try await h.job(second)?.attempt == 0)
    }

    /// An idle consumer's BLMOVE carries its start in the same write (`startClaimed`): the
    /// job the BLMOVE moved is started once the BLMOVE unblocks, at Redis's time then, not
    /// the time the wait began; after a BLMOVE that timed out, the head of the active list
    /// is a running job, left alone; an empty list starts nothing.
    @Test func aBlockedClaimStartsWhatItMovedWhenItUnblocks() async throws {
        let h = try await QueueHarness("start-claimed")
        let consumer = "host:1:\(h.name):idle"
        let name = "idle-claim-\(UUID().uuidString.prefix(8))"
        let connection = h.redis.makeDedicatedConnection(name: name)
        func claim(_ lease: String, block: String = "0.2") async throws -> (moved: RedisReply, started: [RedisReply]) {
            let (moved, started) = try await connection.send(
                ["BLMOVE", h.keys.pending, h.keys.active(consumer), "RIGHT", "LEFT", block],
                thenRun: QueueScripts.startClaimed, keys: [h.keys.active(consumer), h.keys.dead, h.keys.stats],
                arguments: ["1", lease, "10", "60000", h.keys.finished, h.keys.jobPrefix], timeout: .seconds(30))
            return (moved, try started.get().array ?? [])
        }
        func redisNow() async throws -> Int64 {
            let time = try await h.redis.send(["TIME"]).array?.compactMap(\.string).compactMap { Int64($0) } ?? []
            return try #require(time.count == 2 ? time[0] * 1000 + time[1] / 1000 : nil)
        }
        // Nothing pending: the wait times out, nothing starts.
        #expect(try await claim("lease-0") == (.null, []))
        // A job enqueued while this claim waits (its connection's own entry in CLIENT LIST
        // blocked in BLMOVE) starts as the BLMOVE unblocks.
        let waiting = Task { try await claim("lease-1", block: "20") }
        try await eventually("the claim to block") {
            let clients = try await h.redis.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
            return clients.split(separator: "\n").contains { $0.contains("name=\(name)") && $0.contains("cmd=blmove") }
        }
        let before = try await redisNow()
        let id = try await h.enqueue()
        let (moved, started) = try await waiting.value
        #expect(moved.string == id && started.first?.string == id && started.count == 8, "\(started)")
        let record = try #require(try await h.job(id))
        #expect(record.status == .processing && record.attempt == 1)
        #expect(try #require(record.startedAt) >= before, "the start is Redis's time as the BLMOVE unblocked, not ARGV's 1 ms")
        #expect(try await h.redis.send(["HGET", h.keys.job(id), "lease"]).string == "lease-1")
        // Timed out again: the head of the active list is that running job; it is left alone.
        #expect(try await claim("lease-2") == (.null, []))
        #expect(try await h.redis.send(["HGET", h.keys.job(id), "lease"]).string == "lease-1")
        #expect(try await h.redis.send(["LRANGE", h.keys.active(consumer), "0", "-1"]).array?.compactMap(\.string) == [id])
        // A head nobody started (a claim whose start failed, not yet put back) is started by
        // the next claim even when its BLMOVE times out.
        let orphan = try await h.enqueue()
        try await h.redis.send(["LMOVE", h.keys.pending, h.keys.active(consumer), "RIGHT", "LEFT"])
        let (none, adopted) = try await claim("lease-3")
        #expect(none == .null && adopted.first?.string == orphan)
        #expect(try await h.redis.send(["HGET", h.keys.job(orphan), "lease"]).string == "lease-3")
    }

    /// The claim script reads, trims and pushes once per call; the reference is one LMOVE
    /// per job from the right to the left, the way BLMOVE claims. The same claims (some,
    /// none, more than are left) must return the same ids in the same order and leave both
    /// lists alike. `start` then starts only ids still in the caller's active list, once.
    @Test func aClaimMovesWhatOneLMOVEPerJobWouldAndStartTakesOnlyItsOwn() async throws {
        let h = try await QueueHarness("claim-model")
        let ids = (0..<300).map { "claim-\($0)" }
        let (mine, model) = (h.keys.active("host:1:\(h.name):mine"), h.keys.active("host:1:\(h.name):model"))
        let modelPending = h.keys.pending + ":model"
        try await h.redis.send(["RPUSH", h.keys.pending] + ids)
        try await h.redis.send(["RPUSH", modelPending] + ids)
        for n in [120, 0, 1, 500] {
            let claimed = try await h.redis.run(QueueScripts.claim, keys: [h.keys.pending, mine], arguments: [String(n)]).array ?? []
            var moved: [RedisReply] = []
            for _ in 0..<n {
                let id = try await h.redis.send(["LMOVE", modelPending, model, "RIGHT", "LEFT"])
                if id == .null { break }
                moved.append(id)
            }
            #expect(claimed == moved, "n = \(n)")
            let lists = try await h.redis.pipeline([
                ["LRANGE", h.keys.pending, "0", "-1"], ["LRANGE", modelPending, "0", "-1"], ["LRANGE", mine, "0", "-1"],
                ["LRANGE", model, "0", "-1"],
            ])
            #expect(lists[0] == lists[1] && lists[2] == lists[3], "n = \(n)")
        }
        #expect(try await h.redis.send(["LLEN", mine]).int == 300)

        // Two ids of this queue's jobs: one claimed here, one in another consumer's list.
        let (own, theirs) = (try await h.enqueue(), try await h.enqueue())
        let other = h.keys.active("host:2:\(h.name):other")
        try await h.redis.send(["LPUSH", mine, own])
        try await h.redis.send(["LPUSH", other, theirs])
        let started = try await h.redis.run(
            QueueScripts.start, keys: [mine, h.keys.dead, h.keys.stats, h.keys.job(own), h.keys.job(theirs), h.keys.job(own)],
            arguments: [String(JobQueueNow.milliseconds), "lease-1", "10", "60000", h.keys.finished, "3", "", own, theirs, own])
        #expect(started.array?.compactMap(\.string).first == own && started.array?.count == 8, "\(started)")
        #expect(try await h.job(own)?.attempt == 1)
        #expect(try await h.job(theirs)?.status == .queued)

        // A claim into a key of another type (as LMOVE would be) is refused, and takes nothing.
        let broken = h.keys.active("host:3:\(h.name):broken")
        try await h.redis.send(["SET", broken, "not a list"])
        try await h.redis.send(["RPUSH", h.keys.pending, "left-alone"])
        func pending() async throws -> [String] {
            try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) ?? []
        }
        let waiting = try await pending()
        await #expect(throws: RedisError.self) {
            try await h.redis.run(QueueScripts.claim, keys: [h.keys.pending, broken], arguments: ["5"])
        }
        #expect(try await pending() == waiting && waiting.last == "left-alone")
    }

    @Test func aBulkEnqueueThatFailsPartWaySaysWhichJobsWentIn() async throws {
        let h = try await QueueHarness("partial")
        // A second queue whose pending list is not a list: its script call fails.
        let broken = "broken-\(UUID().uuidString.prefix(6).lowercased())"
        try await h.redis.send(["SET", h.queue.configuration.keys(broken).pending, "not a list"])
        let requests = (0..<1000).map { _ in h.request() } + (0..<10).map { _ in EnqueueRequest(type: "noop", queue: broken) }
        let error = await #expect(throws: JobQueueError.self) { try await h.queue.enqueue(batch: requests) }
        #expect(error?.code == .partiallyEnqueued)
        let enqueued = error?.enqueued ?? []
        #expect(enqueued.count == 1010)
        #expect(enqueued.prefix(1000).allSatisfy { $0?.created == true }, "the 1,000 jobs (two script calls) that went in are named")
        #expect(enqueued.suffix(10).allSatisfy { $0 == nil })
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 1000)
        #expect(error?.message.contains("1000 of 1010") == true)
    }

    @Test func theSameIdSentTwiceMakesOneJob() async throws {
        let h = try await QueueHarness("same-id")
        var request = h.request()
        request.id = "job-\(UUID().uuidString.prefix(8).lowercased())"
        #expect(try await h.queue.enqueue(request).outcome == .created)
        #expect(try await h.queue.enqueue(request).outcome == .existing)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 1)
    }

    /// Redis stopped (SIGSTOP) for longer than the heartbeat TTL: every heartbeat looks
    /// expired when it comes back. Neither the worker running the job nor another worker
    /// may reap it: the job runs once.
    @Test(.timeLimit(.minutes(2))) func afterALongRedisPauseNoReaperTakesALiveConsumersJobs() async throws {
        let server = try await LocalRedisServer(logger: TestRedis.logger)
        do {
            let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: server.url), logger: TestRedis.logger)
            let queue = JobQueue(
                redis: pool, configuration: JobQueueConfiguration(prefix: TestRedis.uniquePrefix("pause")), logger: TestRedis.logger)
            let name = "paused"
            let runs = Box(0)
            let gate = ReliabilityTests.Gate()
            var registry = JobHandlerRegistry()
            registry.register(
                "long",
                JobRegistration(
                    handler: ClosureHandler { _ in
                        runs.update { $0 += 1 }
                        await gate.wait()
                        return nil
                    }))
            func worker() -> WorkerService {
                var settings = QueueConsumer.Settings(concurrency: 2)
                settings.heartbeatInterval = .milliseconds(200)
                settings.heartbeatTTL = .seconds(2)
                settings.blockTimeout = .milliseconds(200)
                var configuration = WorkerService.Configuration(queues: [name: settings])
                configuration.promoteInterval = .milliseconds(20)
                configuration.reapInterval = .milliseconds(100)
                return WorkerService(configuration: configuration, jobQueue: queue, registry: registry, logger: TestRedis.logger)
            }
            let first = worker()
            let second = worker()
            let running = [Task { try await first.run() }, Task { try await second.run() }]
            let id = try await queue.enqueue(EnqueueRequest(type: "long", queue: name)).id
            try await eventually("the job to start") { runs.current == 1 }
            // Both workers have been up past their trust period before Redis stops.
            try await Task.sleep(for: .seconds(3))
            kill(server.processIdentifier, SIGSTOP)
            try await Task.sleep(for: .seconds(4))
            kill(server.processIdentifier, SIGCONT)
            // Long enough for any reaper to act on the stale heartbeats, had it wanted to.
            try await Task.sleep(for: .seconds(4))
            gate.release()
            try await eventually("the job to succeed") { try await queue.job(id: id, queue: name)?.status == .succeeded }
            first.stop()
            second.stop()
            for task in running { try await task.value }
            #expect(runs.current == 1, "the job ran once")
            #expect(try await queue.job(id: id, queue: name)?.attempt == 1)
            #expect(try await queue.stats(queue: name).counters["reaped"] == nil)
            pool.close()
        } catch {
            kill(server.processIdentifier, SIGCONT)
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
