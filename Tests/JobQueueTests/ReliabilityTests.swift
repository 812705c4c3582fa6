import DurationUnits
import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

@Suite struct ReliabilityTests {
    /// A handler that waits until the test lets it go, and says when it started.
    final class Gate: @unchecked Sendable {
        // @unchecked Sendable: `continuations` is only touched with `lock` held.
        private let lock = NSLock()
        private var continuations: [CheckedContinuation<Void, Never>] = []
        private var open = false

        func wait() async {
            await withCheckedContinuation { continuation in
                lock.lock()
                if open {
                    lock.unlock()
                    continuation.resume()
                } else {
                    continuations.append(continuation)
                    lock.unlock()
                }
            }
        }

        func release() {
            lock.lock()
            open = true
            let waiting = continuations
            continuations = []
            lock.unlock()
            waiting.forEach { $0.resume() }
        }
    }

    @Test func aReapedConsumerCanNeitherCompleteNorOverwrite() async throws {
        let h = try await QueueHarness("fence")
        let gate = Gate()
        let started = Box(false)
        var slowRegistry = JobHandlerRegistry()
        slowRegistry.register(
            "work",
            JobRegistration(
                handler: ClosureHandler { _ in
                    started.update { $0 = true }
                    await gate.wait()
                    return #""from A""#
                }))
        var fastRegistry = JobHandlerRegistry()
        fastRegistry.register("work", JobRegistration(handler: ClosureHandler { _ in #""from B""# }))

        let id = try await h.enqueue("work")
        // A heartbeats rarely, so the test decides when its lease is considered lost; its one
        // slot stays busy, so it cannot claim the job again itself.
        let workerA = h.worker(concurrency: 1, registry: slowRegistry, heartbeatInterval: .seconds(60), heartbeatTTL: .seconds(60))
        let consumerA = workerA.consumers[0].consumerID
        try await h.whileRunning(workerA) {
            try await eventually("A to start the job") { started.current }
            // A looks dead: its heartbeat deadline is in the past. The reaper requeues its job.
            try await h.redis.send(["ZADD", h.keys.consumers, "1", consumerA])
            #expect(try await h.queue.reapExpiredConsumers(queue: h.name) == 1)
            #expect(try await h.job(id)?.status == .queued)
            // B takes the job over and finishes it.
            try await h.whileRunning(h.worker(registry: fastRegistry)) { _ = try await h.waitForStatus(id, .succeeded) }
            // Now A finishes too: its outcome must be refused.
            gate.release()
            try await eventually("A's handler to finish") { workerA.consumers[0].runningJobs == 0 }
        }
        let job = try #require(try await h.job(id))
        #expect(job.status == .succeeded)
        #expect(job.result == #""from B""#)
        #expect(job.attempt == 2)
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.counters["succeeded:work"] == 1)
        #expect(stats.counters["reaped"] == 1)
    }

    @Test func gracefulShutdownRequeuesWhatDidNotFinishWithoutSpendingAnAttempt() async throws {
        let h = try await QueueHarness("shutdown")
        let running = Box(0)
        var registry = JobHandlerRegistry()
        registry.register(
            "long",
            JobRegistration(
                handler: ClosureHandler { _ in
                    running.update { $0 += 1 }
                    try await Task.sleep(for: .seconds(60))
                    return nil
                }))
        let ids = try await h.queue.enqueue(batch: (0..<5).map { _ in h.request("long") }).map(\.id)
        let worker = h.worker(concurrency: 3, registry: registry, shutdownTimeout: .milliseconds(300))
        let consumer = worker.consumers[0].consumerID
        try await h.whileRunning(worker) {
            try await eventually("3 jobs to run") { running.current == 3 }
        }
        // Three were running and went back; two never started. None failed, none lost.
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 5)
        #expect(try await h.redis.send(["LLEN", h.keys.active(consumer)]).int == 0)
        #expect(try await h.redis.send(["ZSCORE", h.keys.consumers, consumer]).isNull)
        for id in ids {
            let job = try #require(try await h.job(id))
            #expect(job.status == .queued)
            #expect(job.attempt == 0)
        }
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.dead == 0 && stats.scheduled == 0 && stats.counters["reaped"] == nil)
    }

    @Test func gracefulShutdownLetsRunningJobsFinishWithinTheDeadline() async throws {
        let h = try await QueueHarness("drain")
        let running = Box(0)
        var registry = JobHandlerRegistry()
        registry.register(
            "short",
            JobRegistration(
                handler: ClosureHandler { _ in
                    running.update { $0 += 1 }
                    try await Task.sleep(for: .milliseconds(300))
                    return #""done""#
                }))
        let ids = try await h.queue.enqueue(batch: (0..<2).map { _ in h.request("short") }).map(\.id)
        try await h.whileRunning(h.worker(concurrency: 2, registry: registry, shutdownTimeout: .seconds(10))) {
            try await eventually("both jobs to run") { running.current == 2 }
        }
        for id in ids { #expect(try await h.job(id)?.status == .succeeded) }
    }

    @Test func theReaperRequeuesALostConsumersJobs() async throws {
        let h = try await QueueHarness("reap")
        let ids = try await h.queue.enqueue(batch: (0..<3).map { _ in h.request() }).map(\.id)
        // A consumer that claimed three jobs and died: its heartbeat deadline has passed.
        let ghost = "ghost-host:1:\(h.name):dead"
        for _ in ids { try await h.redis.send(["LMOVE", h.keys.pending, h.keys.active(ghost), "RIGHT", "LEFT"]) }
        try await h.redis.send(["ZADD", h.keys.consumers, String(JobQueueNow.milliseconds - 1), ghost])
        // A live consumer is left alone.
        let alive = "live-host:2:\(h.name):alive"
        try await h.redis.send(["ZADD", h.keys.consumers, String(JobQueueNow.milliseconds + 60_000), alive])
        #expect(try await h.queue.release(consumer: alive, queue: h.name, onlyIfExpired: true) == -1)

        #expect(try await h.queue.reapExpiredConsumers(queue: h.name) == 3)
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 3)
        #expect(try await h.redis.send(["EXISTS", h.keys.active(ghost)]).int == 0)
        #expect(try await h.redis.send(["ZRANGE", h.keys.consumers, "0", "-1"]).array?.compactMap(\.string) == [alive])
        // Then a worker runs them.
        try await h.whileRunning(h.worker()) {
            for id in ids { _ = try await h.waitForStatus(id, .succeeded) }
        }
    }

    @Test func aJobThatKeepsKillingItsWorkersEndsDead() async throws {
        let h = try await QueueHarness("poison")
        let id = try await h.enqueue("noop", maxAttempts: 2)
        // Two claims by consumers that then vanished, as the start script counts them.
        try await h.redis.send(["HSET", h.keys.job(id), "attempt", "2"])
        try await h.whileRunning(h.worker()) { _ = try await h.waitForStatus(id, .failed) }
        #expect(try await h.job(id)?.lastError?.contains("workers were lost") == true)
    }

    @Test func workersSurviveTheirConnectionsBeingKilledMidRun() async throws {
        let h = try await QueueHarness("kill")
        // At least 3000 * 3 ms / 8 slots = 1.1 s of work: time for the kills below.
        let ids = try await h.queue.enqueue(batch: (0..<3000).map { _ in h.request(payload: #"{"effect":"e","sleepMs":3}"#) }).map(\.id)
        let admin = RedisConnection(configuration: try await TestRedis.configuration(), name: "admin", logger: TestRedis.logger)
        var kills = 0
        try await h.whileRunning(h.worker(concurrency: 8)) {
            try await eventually("jobs to flow") { try await h.queue.stats(queue: h.name).total("succeeded") > 100 }
            // Kill this worker's fetch and ack connections ten times mid-run; some kills land
            // after Redis ran a claim and before its reply arrived (the orphan case). A
            // connection being re-opened is not listed, so keep looking until ten have landed.
            var rounds = 0
            while kills < 10 && rounds < 200 {
                rounds += 1
                let clients = try await admin.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
                for line in clients.split(separator: "\n")
                where line.contains("name=fetch-\(h.name)") || line.contains("name=ack-\(h.name)") {
                    if let id = line.split(separator: " ").first(where: { $0.hasPrefix("id=") })?.dropFirst(3) {
                        _ = try? await admin.send(["CLIENT", "KILL", "ID", String(id)])
                        kills += 1
                    }
                }
                try await Task.sleep(for: .milliseconds(30))
            }
            try await eventually("every job to succeed", timeout: .seconds(60)) {
                try await h.queue.stats(queue: h.name).total("succeeded") == 3000
            }
        }
        #expect(kills >= 10)
        #expect(try await h.redis.send(["HGET", h.keys.effects("e"), "applied"]).int == 3000)
        for id in ids.prefix(50) { #expect(try await h.job(id)?.status == .succeeded) }
    }

    /// Waits for the harness's consumer to block in BLMOVE; its fetch connection's client id.
    func blockedFetchClient(_ h: QueueHarness, _ admin: RedisConnection) async throws -> String {
        var fetchID: String?
        try await eventually("the consumer to block in BLMOVE") {
            let clients = try await admin.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
            let line = clients.split(separator: "\n").first { $0.contains("name=fetch-\(h.name)") && $0.contains("cmd=blmove") }
            fetchID = line?.split(separator: " ").first { $0.hasPrefix("id=") }.map { String($0.dropFirst(3)) }
            return fetchID != nil
        }
        return try #require(fetchID)
    }

    @Test func jobsWhoseClaimReplyWasLostAreRequeuedByTheLiveConsumer() async throws {
        let h = try await QueueHarness("orphan")
        // A long heartbeat TTL: the reaper cannot be what rescues the job.
        let worker = h.worker(concurrency: 2, heartbeatInterval: .seconds(1), heartbeatTTL: .seconds(120))
        let consumer = worker.consumers[0].consumerID
        let admin = RedisConnection(configuration: try await TestRedis.configuration(), name: "admin", logger: TestRedis.logger)
        try await h.whileRunning(worker) {
            let fetchID = try await blockedFetchClient(h, admin)
            // Redis moved a job into the consumer's active list, but the reply never arrived:
            // as if BLMOVE had run just before its connection died.
            let id = try await h.queue.enqueue(h.request(delay: .seconds(3600))).id
            try await h.redis.send(["ZREM", h.keys.scheduled, id])
            try await h.redis.send(["LPUSH", h.keys.active(consumer), id])
            try await admin.send(["CLIENT", "KILL", "ID", fetchID])
            let job = try await h.waitForStatus(id, .succeeded, timeout: .seconds(10))
            #expect(job.attempt == 1)
        }
        #expect(try await h.queue.stats(queue: h.name).counters["reaped"] == nil)
    }

    /// A job back in a live consumer's active list with no failure seen by it (an
    /// acknowledgement Redis confirmed and then lost in a failover) goes back to pending
    /// within a heartbeat TTL: the consumer checks its own list once a TTL.
    @Test func aJobLeftInALiveConsumersListWithNoFailureSeenIsRequeuedWithinItsTTL() async throws {
        let h = try await QueueHarness("left")
        let worker = h.worker(concurrency: 2, heartbeatInterval: .milliseconds(200), heartbeatTTL: .seconds(2))
        let consumer = worker.consumers[0].consumerID
        let admin = RedisConnection(configuration: try await TestRedis.configuration(), name: "admin", logger: TestRedis.logger)
        try await h.whileRunning(worker) {
            // Blocked in BLMOVE, nothing failing: no error of its own will make it look.
            _ = try await blockedFetchClient(h, admin)
            // Started with a lease this worker no longer runs under: its finish was confirmed
            // and then lost, so the job is back as it was while it ran.
            let id = try await h.queue.enqueue(h.request(delay: .seconds(3600))).id
            try await h.redis.send(["ZREM", h.keys.scheduled, id])
            try await h.redis.send(["HSET", h.keys.job(id), "status", "processing", "attempt", "1", "lease", "a-lease-let-go"])
            try await h.redis.send(["LPUSH", h.keys.active(consumer), id])
            let job = try await h.waitForStatus(id, .succeeded, timeout: .seconds(15))
            #expect(job.attempt == 1, "its lost run given back")
        }
        #expect(try await h.queue.stats(queue: h.name).counters["reaped"] == nil, "the live consumer put it back, not a reaper")
    }

    @Test func theDeadSetIsCappedByCount() async throws {
        var configuration = JobQueueConfiguration()
        configuration.deadMaxCount = 5
        let h = try await QueueHarness("cap", configuration: configuration)
        let ids = try await h.queue.enqueue(batch: (0..<8).map { _ in h.request(payload: #"{"sleepMs":"x"}"#) }).map(\.id)
        try await h.whileRunning(h.worker()) {
            try await eventually("8 dead jobs") { try await h.queue.stats(queue: h.name).dead == 8 }
        }
        #expect(try await h.queue.trimDeadJobs(queue: h.name) == 3)
        #expect(try await h.queue.stats(queue: h.name).dead == 5)
        var remaining = 0
        for id in ids where try await h.job(id) != nil { remaining += 1 }
        #expect(remaining == 5)
    }
}
