import Foundation
@testable import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Synchronization
import Testing

/// Long-polls wake when their job ends (`JobWaiter`): not by reading the record on a timer.
@Suite struct JobWaiterTests {
    /// Longer than any wait here: what wakes a waiter in these tests is the worker's message
    /// (or a resubscription), not the sweep, so a lost message fails them.
    static let noSweep = Duration.seconds(3600)

    /// A mark lost without the subscription dropping (a failover's unreplicated write, an
    /// older worker that publishes nothing): the sweep marks the job again and wakes the
    /// waiter once it has ended.
    @Test func theSweepWakesAWaiterWhoseMarkWasLost() async throws {
        let h = try await QueueHarness("waiter-sweep")
        let waiter = JobWaiter(jobQueue: h.queue, sweepInterval: .seconds(1), logger: TestRedis.logger)
        defer { waiter.close() }
        let id = try await h.enqueue()
        let waiting = Task { try await waiter.wait(for: id, queue: h.name, timeout: .seconds(60)) }
        try await eventually("the job to be marked") { (try? await h.redis.send(["HGET", h.keys.job(id), "waiter"]).string) == "1" }
        // The worker that runs it sees no mark and publishes nothing.
        try await h.redis.send(["HDEL", h.keys.job(id), "waiter"])
        let clock = ContinuousClock()
        let started = clock.now
        let record = try await h.whileRunning(h.worker()) {
            _ = try await h.waitForStatus(id, .succeeded)
            return try await waiting.value
        }
        #expect(record?.status == .succeeded)
        #expect(clock.now - started < .seconds(30), "woken by the sweep, not timed out (60 s)")
    }

    @Test func aWaiterWakesWhenItsJobSucceedsAndManyWaitersShareOneJob() async throws {
        let h = try await QueueHarness("waiter-wakes")
        let waiter = JobWaiter(jobQueue: h.queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
        defer { waiter.close() }
        let id = try await h.queue.enqueue(h.request(payload: #"{"sleepMs":200}"#)).id
        let clock = ContinuousClock()
        let started = clock.now
        let records = try await withThrowingTaskGroup(of: JobRecord?.self) { group in
            for _ in 0..<50 { group.addTask { try await waiter.wait(for: id, queue: h.name, timeout: .seconds(60)) } }
            // Every waiter has marked the job before the worker starts.
            try await eventually("50 waiters") { waiter.waitingCount == 50 }
            return try await h.whileRunning(h.worker()) {
                var records: [JobRecord?] = []
                for try await record in group { records.append(record) }
                return records
            }
        }
        #expect(records.count == 50)
        #expect(records.allSatisfy { $0?.status == .succeeded && $0?.id == id })
        // Woken, not timed out: the waits were for 60 s.
        #expect(clock.now - started < .seconds(30))
        #expect(waiter.waitingCount == 0)
        // The job was marked as waited for, which is what made the worker publish it.
        #expect(try await h.redis.send(["HGET", h.keys.job(id), "waiter"]).string == "1")
    }

    @Test func aWaiterWakesWhenItsJobGoesDead() async throws {
        let h = try await QueueHarness("waiter-dead")
        let waiter = JobWaiter(jobQueue: h.queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
        defer { waiter.close() }
        let id = try await h.queue.enqueue(h.request(payload: #"{"failTimes":5}"#, maxAttempts: 1)).id
        let clock = ContinuousClock()
        let started = clock.now
        let record = try await h.whileRunning(h.worker()) {
            try await waiter.wait(for: id, queue: h.name, timeout: .seconds(60))
        }
        #expect(record?.status == .failed)
        #expect(clock.now - started < .seconds(30), "woken, not timed out")
    }

    @Test func aWaiterForAJobThatNeverEndsGetsTheRecordAsItIsAtItsTimeout() async throws {
        let h = try await QueueHarness("waiter-timeout")
        let waiter = JobWaiter(jobQueue: h.queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
        defer { waiter.close() }
        // No worker runs: the job stays queued.
        let id = try await h.enqueue()
        let clock = ContinuousClock()
        let started = clock.now
        let record = try await waiter.wait(for: id, queue: h.name, timeout: .milliseconds(400))
        #expect(clock.now - started >= .milliseconds(400))
        #expect(record?.status == .queued)
        #expect(waiter.waitingCount == 0)
        // An unknown job is answered at once, as nil; a finished one at once, as it is.
        #expect(try await waiter.wait(for: "no-such-job", queue: h.name, timeout: .seconds(30)) == nil)
        let done = try await h.enqueue()
        _ = try await h.whileRunning(h.worker()) { try await h.waitForStatus(done, .succeeded) }
        let quick = clock.now
        #expect(try await waiter.wait(for: done, queue: h.name, timeout: .seconds(30))?.status == .succeeded)
        #expect(clock.now - quick < .seconds(30))
    }

    /// 1,000 held long-polls send Redis nothing while they wait (the issue's bound: under 100
    /// commands a second), and all wake when their jobs end. A private server, so that the
    /// command counts are this test's alone.
    @Test(.timeLimit(.minutes(3))) func aThousandHeldLongPollsCostRedisAlmostNothingWhileWaiting() async throws {
        let server = try await LocalRedisServer(logger: TestRedis.logger)
        do {
            let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: server.url), maximumConnections: 8, logger: TestRedis.logger)
            let queue = JobQueue(redis: pool, configuration: JobQueueConfiguration(prefix: "waiters"), logger: TestRedis.logger)
            let waiter = JobWaiter(jobQueue: queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
            defer { waiter.close() }
            let results = try await queue.enqueue(batch: (0..<1000).map { _ in EnqueueRequest(type: "noop", payload: "{}", queue: "q") })
            let ids = results.map(\.id)
            func commands() async throws -> Int {
                let text = try await pool.send(["INFO", "commandstats"]).string ?? ""
                return text.split(whereSeparator: \.isNewline).reduce(0) { total, line in
                    total + (Int(line.split(separator: ":calls=").dropFirst().first?.prefix { $0.isNumber } ?? "") ?? 0)
                }
            }
            let records = try await withThrowingTaskGroup(of: JobRecord?.self) { group in
                for id in ids { group.addTask { try await waiter.wait(for: id, queue: "q", timeout: .seconds(120)) } }
                try await eventually("1,000 waiters to have marked their jobs") {
                    try await pool.pipeline(ids.map { ["HEXISTS", "waiters:{q}:job:\($0)", "waiter"] }).allSatisfy { $0.int == 1 }
                }
                // The subscription's first catch-up marks every job again (a command each): on a
                // loaded machine it can come after the callers' own marks, so it is awaited.
                try await eventually("the subscription's catch-up to have ended") { waiter.catchUps >= 1 }
                let before = try await commands()
                let clock = ContinuousClock()
                let from = clock.now
                try await Task.sleep(for: .seconds(3))
                let spent = try await commands() - before - 1  // less the first INFO
                let seconds = (clock.now - from).seconds
                print("1,000 held long-polls: \(spent) Redis commands in \(String(format: "%.1f", seconds)) s")
                #expect(Double(spent) / seconds < 100, "\(spent) commands in \(seconds) s")
                var settings = QueueConsumer.Settings(concurrency: 16)
                settings.blockTimeout = .milliseconds(200)
                let worker = WorkerService(
                    configuration: WorkerService.Configuration(queues: ["q": settings]), jobQueue: queue, registry: .builtIn(),
                    logger: TestRedis.logger)
                let running = Task { try await worker.run() }
                defer { worker.stop() }
                let working = clock.now
                var records: [JobRecord?] = []
                for try await record in group { records.append(record) }
                #expect(clock.now - working < .seconds(60), "woken, not timed out (120 s)")
                worker.stop()
                try await running.value
                return records
            }
            #expect(records.count == 1000)
            #expect(records.allSatisfy { $0?.status == .succeeded })
            pool.close()
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// A queue on a topology that fails over: writes wait for a replica, connections give up fast.
    static func queue(url: String, test: String) throws -> JobQueue {
        var configuration = try RedisConfiguration(url: url)
        configuration.reconnectTimeout = .seconds(30)
        configuration.connectTimeout = .milliseconds(300)
        configuration.replicaAcknowledgements = 1
        configuration.replicaTimeout = .milliseconds(500)
        let pool = RedisConnectionPool(configuration: configuration, maximumConnections: 8, logger: TestRedis.logger)
        return JobQueue(redis: pool, configuration: JobQueueConfiguration(prefix: TestRedis.uniquePrefix(test)), logger: TestRedis.logger)
    }

    /// The subscription follows the queue's slot when its primary fails over (and when one is
    /// killed): waiters registered before wake when the job ends on the new primary.
    @Test(.timeLimit(.minutes(4))) func onAClusterAWaiterWakesAfterItsQueuesPrimaryFailsOver() async throws {
        let cluster = try await LocalRedisCluster.start()
        do {
            let queue = try Self.queue(url: cluster.url, test: "waiter-cluster")
            let pool = queue.redis
            let name = "failover"
            let keys = queue.configuration.keys(name)
            let waiter = JobWaiter(jobQueue: queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
            defer { waiter.close() }
            var settings = QueueConsumer.Settings(concurrency: 4)
            settings.blockTimeout = .milliseconds(200)
            var workerConfiguration = WorkerService.Configuration(queues: [name: settings])
            workerConfiguration.promoteInterval = .milliseconds(50)

            for round in ["a graceful failover", "a killed primary"] {
                // The job waits in pending while no worker runs; its waiters subscribe and mark it.
                let id = try await queue.enqueue(EnqueueRequest(type: "noop", payload: "{}", queue: name)).id
                let waiting = Task { try await waiter.wait(for: id, queue: name, timeout: .seconds(120)) }
                try await eventually("the job to be marked as waited for (\(round))") {
                    (try? await pool.send(["HGET", keys.job(id), "waiter"]).string) == "1"
                }
                let primary = try await cluster.primary(forKey: keys.pending)
                let replica = try await cluster.replica(of: primary)
                if round == "a graceful failover" {
                    try await cluster.failover(to: replica)
                } else {
                    await primary.kill()
                    try await eventually("the replica to take over", timeout: .seconds(60)) {
                        (try? await cluster.primary(forKey: keys.pending).port) == replica.port
                    }
                }
                let worker = WorkerService(configuration: workerConfiguration, jobQueue: queue, registry: .builtIn(), logger: TestRedis.logger)
                let clock = ContinuousClock()
                let working = clock.now
                let running = Task { try await worker.run() }
                let record = try await waiting.value
                #expect(clock.now - working < .seconds(60), "\(round): woken, not timed out (120 s)")
                worker.stop()
                try await running.value
                #expect(record?.status == .succeeded, "\(round)")
                #expect(try await pool.server(forKey: keys.pending) == replica.address, "\(round)")
                if round == "a killed primary" {
                    try await primary.restart()
                    try await cluster.waitUntilHealthy(primaries: 3, replicas: 3)
                }
            }
            pool.close()
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// Behind Sentinel: the subscription moves to the new primary when the old one is killed
    /// (and a worker started right after the failover runs: its first command met a
    /// connection to the dead primary and used to end it).
    @Test(.timeLimit(.minutes(3))) func behindSentinelAWaiterWakesAfterItsPrimaryIsKilled() async throws {
        let group = try await LocalSentinelGroup.start()
        do {
            let queue = try Self.queue(url: group.url, test: "waiter-sentinel")
            let pool = queue.redis
            let waiter = JobWaiter(jobQueue: queue, sweepInterval: Self.noSweep, logger: TestRedis.logger)
            defer { waiter.close() }
            let keys = queue.configuration.keys("default")
            let id = try await queue.enqueue(EnqueueRequest(type: "noop", payload: "{}", queue: "default")).id
            let waiting = Task { try await waiter.wait(for: id, queue: "default", timeout: .seconds(120)) }
            try await eventually("the job to be marked as waited for") {
                (try? await pool.send(["HGET", keys.job(id), "waiter"]).string) == "1"
            }
            let primary = try await group.primary()
            await primary.kill()
            try await eventually("a new primary", timeout: .seconds(60)) { (try? await group.primary().port).map { $0 != primary.port } ?? false }
            var settings = QueueConsumer.Settings(concurrency: 4)
            settings.blockTimeout = .milliseconds(200)
            let worker = WorkerService(
                configuration: WorkerService.Configuration(queues: ["default": settings]), jobQueue: queue, registry: .builtIn(),
                logger: TestRedis.logger)
            let clock = ContinuousClock()
            let working = clock.now
            let running = Task { try await worker.run() }
            let record = try await waiting.value
            #expect(clock.now - working < .seconds(60), "woken, not timed out (120 s)")
            worker.stop()
            try await running.value
            #expect(record?.status == .succeeded)
            pool.close()
        } catch {
            await group.stop()
            throw error
        }
        await group.stop()
    }
}
