import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// Jobs claimed ahead of a free handler slot (`QueueConsumer.Settings.prefetch`).
@Suite struct PrefetchTests {
    /// A registry whose `work` jobs count themselves and wait for `gate`.
    static func blockingRegistry(_ gate: ReliabilityTests.Gate, running: Box<Int>, ran: Box<Int>) -> JobHandlerRegistry {
        var registry = JobHandlerRegistry()
        registry.register(
            "work",
            JobRegistration(
                handler: ClosureHandler { _ in
                    running.update { $0 += 1 }
                    await gate.wait()
                    running.update { $0 -= 1 }
                    ran.update { $0 += 1 }
                    return nil
                }))
        return registry
    }

    static func worker(
        _ h: QueueHarness, concurrency: Int, prefetch: Int, registry: JobHandlerRegistry, shutdownTimeout: Duration = .milliseconds(300)
    ) -> WorkerService {
        var settings = QueueConsumer.Settings(concurrency: concurrency)
        settings.prefetch = prefetch
        settings.heartbeatInterval = .milliseconds(200)
        settings.heartbeatTTL = .seconds(10)
        settings.blockTimeout = .milliseconds(200)
        var configuration = WorkerService.Configuration(queues: [h.name: settings])
        configuration.shutdownTimeout = shutdownTimeout
        configuration.promoteInterval = .milliseconds(20)
        return WorkerService(configuration: configuration, jobQueue: h.queue, registry: registry, logger: TestRedis.logger)
    }

    @Test func aBusyWorkerClaimsAheadNoMoreThanItsPrefetchAndRunsNoMoreThanItsSlots() async throws {
        let h = try await QueueHarness("prefetch-ahead")
        let gate = ReliabilityTests.Gate()
        let running = Box(0)
        let ran = Box(0)
        let peak = Box(0)
        var registry = JobHandlerRegistry()
        registry.register(
            "work",
            JobRegistration(
                handler: ClosureHandler { _ in
                    let now = running.update { value -> Int in
                        value += 1
                        return value
                    }
                    peak.update { $0 = max($0, now) }
                    await gate.wait()
                    running.update { $0 -= 1 }
                    ran.update { $0 += 1 }
                    return nil
                }))
        _ = try await h.queue.enqueue(batch: (0..<7).map { _ in h.request("work") })
        let worker = Self.worker(h, concurrency: 2, prefetch: 3, registry: registry)
        let consumer = worker.consumers[0].consumerID
        try await h.whileRunning(worker) {
            // Let the handlers go before the worker stops, whatever fails: it waits for them.
            defer { gate.release() }
            try await eventually("2 jobs to run and 3 to wait in the worker") {
                let active = try await h.redis.send(["LLEN", h.keys.active(consumer)]).int
                let pending = try await h.redis.send(["LLEN", h.keys.pending]).int
                return running.current == 2 && active == 5 && pending == 2
            }
            // Claimed ahead means started: leased and counted as an attempt, in this
            // consumer's active list, so a crash loses none of them.
            let ahead = try await h.redis.send(["LRANGE", h.keys.active(consumer), "0", "-1"]).array?.compactMap(\.string) ?? []
            for id in ahead { #expect(try await h.job(id)?.status == .processing) }
            gate.release()
            try await eventually("every job to run") { ran.current == 7 }
        }
        #expect(peak.current == 2)
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.counters["succeeded:work"] == 7)
    }

    /// Stopped with one job running and two waiting: the running one finishes within the
    /// deadline (drained) or is given back at it; the waiting two never start, and go back
    /// with their attempt.
    @Test(arguments: [false, true])
    func aStoppedWorkerGivesBackWhatItClaimedAheadWithTheAttemptRefunded(runningOutlivesTheDeadline: Bool) async throws {
        let h = try await QueueHarness("prefetch-stop")
        let entered = Box(0)
        var registry = JobHandlerRegistry()
        registry.register(
            "work",
            JobRegistration(
                handler: ClosureHandler { _ in
                    entered.update { $0 += 1 }
                    // Cancelled at the shutdown deadline when it outlives it.
                    try await Task.sleep(for: runningOutlivesTheDeadline ? .seconds(60) : .milliseconds(400))
                    return nil
                }))
        let ids = try await h.queue.enqueue(batch: (0..<5).map { _ in h.request("work") }).map(\.id)
        let worker = Self.worker(
            h, concurrency: 1, prefetch: 2, registry: registry,
            shutdownTimeout: runningOutlivesTheDeadline ? .milliseconds(300) : .seconds(10))
        let consumer = worker.consumers[0].consumerID
        try await h.whileRunning(worker) {
            try await eventually("1 job to run and 2 to wait") {
                let active = try await h.redis.send(["LLEN", h.keys.active(consumer)]).int
                return entered.current == 1 && active == 3
            }
        }
        #expect(entered.current == 1)
        #expect(try await h.redis.send(["EXISTS", h.keys.active(consumer)]).int == 0)
        var records: [JobRecord] = []
        for id in ids { records.append(try #require(try await h.job(id))) }
        let finished = records.filter { $0.status == .succeeded }
        #expect(finished.count == (runningOutlivesTheDeadline ? 0 : 1))
        #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 5 - finished.count)
        for job in records where job.status != .succeeded { #expect(job.status == .queued && job.attempt == 0, "\(job)") }
    }

    /// A job claimed ahead of a slot on its last attempt (by its own `maxAttempts`, or by its
    /// type's when it names none) is claimed but not started until its slot comes: a worker
    /// lost while it waited costs it no attempt, so it still runs. Jobs with attempts to
    /// spare are started ahead as before, and a running job's attempt is spent by the loss.
    @Test func aJobOnItsLastAttemptClaimedAheadIsStartedOnlyWhenItsSlotComes() async throws {
        let h = try await QueueHarness("prefetch-last")
        let gate = ReliabilityTests.Gate()
        let running = Box(0)
        let ran = Box(0)
        var registry = Self.blockingRegistry(gate, running: running, ran: ran)
        let onceRan = Box(0)
        registry.register(
            "once",
            JobRegistration(
                handler: ClosureHandler { _ in
                    onceRan.update { $0 += 1 }
                    return #""once""#
                }, retryPolicy: RetryPolicy(maxAttempts: 1)))
        let requests = [
            h.request("work", maxAttempts: 1),  // runs, and is lost with the worker
            h.request("work", maxAttempts: 1),  // its last attempt: waits claimed, not started
            h.request("work", maxAttempts: 5),  // attempts to spare: started ahead
            h.request("once"),  // its type's one attempt: waits claimed, not started
        ]
        let ids = try await h.queue.enqueue(batch: requests).map(\.id)
        var settings = QueueConsumer.Settings(concurrency: 1)
        settings.prefetch = 3
        // No heartbeat during the test: the test loses the consumer itself.
        settings.heartbeatInterval = .seconds(60)
        settings.heartbeatTTL = .seconds(120)
        settings.blockTimeout = .milliseconds(200)
        var configuration = WorkerService.Configuration(queues: [h.name: settings])
        configuration.promoteInterval = .milliseconds(20)
        let worker = WorkerService(configuration: configuration, jobQueue: h.queue, registry: registry, logger: TestRedis.logger)
        let consumer = worker.consumers[0].consumerID
        try await h.whileRunning(worker) {
            defer { gate.release() }
            try await eventually("1 job to run and 3 to wait in the worker") {
                let active = try await h.redis.send(["LLEN", h.keys.active(consumer)]).int
                return running.current == 1 && active == 4
            }
            func state(_ id: String) async throws -> (JobStatus, Int) {
                let job = try #require(try await h.job(id))
                return (job.status, job.attempt)
            }
            #expect(try await state(ids[0]) == (.processing, 1))
            #expect(try await state(ids[1]) == (.queued, 0))
            #expect(try await state(ids[2]) == (.processing, 1))
            #expect(try await state(ids[3]) == (.queued, 0))

            // The worker is lost (its deadline passes) and its jobs are reaped.
            try await h.redis.send(["ZADD", h.keys.consumers, "1", consumer])
            _ = try await h.queue.reapExpiredConsumers(queue: h.name)
            #expect(try await h.redis.send(["LLEN", h.keys.pending]).int == 4)
            #expect(try await state(ids[0]) == (.queued, 1))
            #expect(try await state(ids[1]) == (.queued, 0))
            #expect(try await state(ids[3]) == (.queued, 0))
            gate.release()
            for id in ids[1...] { _ = try await h.waitForStatus(id, .succeeded, timeout: .seconds(10)) }
            let lost = try await h.waitForStatus(ids[0], .failed, timeout: .seconds(10))
            #expect(lost.lastError == "out of attempts: its workers were lost")
        }
        // Each waiting job ran once, on its one attempt, though the lost worker still held it.
        #expect(try await h.job(ids[1])?.attempt == 1)
        #expect(try await h.job(ids[3])?.attempt == 1)
        #expect(try await h.job(ids[3])?.result == #""once""#)
        #expect(onceRan.current == 1)
    }

    /// A worker with every slot busy does not wait on the server for new jobs: one claimed then
    /// would wait behind its running jobs while another worker sat idle.
    @Test func aNewJobGoesToAnIdleWorkerNotToOneWhoseSlotsAreBusy() async throws {
        let h = try await QueueHarness("prefetch-idle")
        let gate = ReliabilityTests.Gate()
        let running = Box(0)
        let ran = Box(0)
        let blocked = try await h.enqueue("work")
        let busy = Self.worker(h, concurrency: 1, prefetch: 4, registry: Self.blockingRegistry(gate, running: running, ran: ran))
        var idleRegistry = JobHandlerRegistry()
        idleRegistry.register("work", JobRegistration(handler: ClosureHandler { _ in #""idle""# }))
        let idle = Self.worker(h, concurrency: 1, prefetch: 4, registry: idleRegistry)
        try await h.whileRunning(busy) {
            defer { gate.release() }
            try await eventually("the busy worker's slot to be taken") { running.current == 1 }
            try await h.whileRunning(idle) {
                // The idle worker waits on the server before the job exists; the busy one never does.
                func blocked(_ worker: WorkerService) -> @Sendable (Substring) -> Bool {
                    let name = "name=fetch-\(h.name)-\(worker.consumers[0].consumerID.split(separator: ":").last ?? "") "
                    return { $0.contains(name) && $0.contains("cmd=blmove") }
                }
                try await eventually("the idle worker, and only it, to wait for jobs") {
                    let clients = (try await h.redis.send(["CLIENT", "LIST"]).string ?? "").split(separator: "\n")
                    return clients.contains(where: blocked(idle)) && !clients.contains(where: blocked(busy))
                }
                let id = try await h.enqueue("work")
                let job = try await h.waitForStatus(id, .succeeded, timeout: .seconds(10))
                #expect(job.result == #""idle""#)
            }
            #expect(try await h.job(blocked)?.status == .processing)
            gate.release()
            _ = try await h.waitForStatus(blocked, .succeeded)
        }
    }
}
