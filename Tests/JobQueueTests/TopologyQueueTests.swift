import Foundation
import JobQueue
import RedisTestSupport
import Synchronization
import Testing

@testable import RedisClient

/// The queue on real topologies while they change under it: a 3-primary, 3-replica Redis
/// Cluster whose slots move and whose primaries fail over or die, and a Sentinel group
/// whose primary is killed. A producer enqueues all along; what it was told was enqueued
/// must run, each job's effect exactly once.
@Suite(.serialized) struct TopologyQueueTests {
    /// A producer and a worker on `queues`, and the checks after `events`.
    final class Run: Sendable {
        let queue: JobQueue
        let queues: [String]
        let acknowledged = Mutex<[String: String]>([:])  // id -> queue
        let producing = Atomic<Bool>(true)

        init(url: String, queues: [String]) throws {
            var configuration = try RedisConfiguration(url: url)
            // WAIT for one replica: a primary killed right after cannot take an acknowledged write with it.
            configuration.replicaAcknowledgements = 1
            configuration.replicaTimeout = .milliseconds(500)
            configuration.reconnectTimeout = .seconds(30)
            configuration.connectTimeout = .milliseconds(300)
            let pool = RedisConnectionPool(configuration: configuration, maximumConnections: 8, logger: TestRedis.logger)
            queue = JobQueue(
                redis: pool, configuration: JobQueueConfiguration(prefix: TestRedis.uniquePrefix("topo")), logger: TestRedis.logger)
            self.queues = queues
        }

        func worker() -> WorkerService {
            var settings = QueueConsumer.Settings(concurrency: 8)
            settings.heartbeatInterval = .milliseconds(200)
            settings.heartbeatTTL = .seconds(5)
            settings.blockTimeout = .milliseconds(300)
            var configuration = WorkerService.Configuration(queues: Dictionary(uniqueKeysWithValues: queues.map { ($0, settings) }))
            configuration.promoteInterval = .milliseconds(50)
            configuration.reapInterval = .milliseconds(500)
            return WorkerService(configuration: configuration, jobQueue: queue, registry: .builtIn(), logger: TestRedis.logger)
        }

        /// Enqueues 10 jobs per queue at a time until told to stop; keeps what was acknowledged.
        func produce() async {
            while producing.load(ordering: .relaxed) {
                let requests = queues.flatMap { name in
                    (0..<10).map { _ in
                        // A unique key each: the finish deletes it, in the queue's slot, while slots move.
                        var request = EnqueueRequest(type: "noop", payload: #"{"effect":"e","sleepMs":2}"#, queue: name)
                        request.uniqueKey = "u-\(UUID().uuidString)"
                        return request
                    }
                }
                var results: [EnqueueResult?] = []
                do {
                    results = try await queue.enqueue(batch: requests)
                } catch let error as JobQueueError where error.code == .partiallyEnqueued {
                    results = error.enqueued
                } catch {
                    // Not acknowledged: the test promises nothing about these.
                }
                acknowledged.withLock { acknowledged in
                    for (request, result) in zip(requests, results) { if let result { acknowledged[result.id] = request.queue } }
                }
                try? await Task.sleep(for: .milliseconds(30))
            }
        }

        /// Runs producer and worker around `events`, then checks every queue.
        func run(_ events: () async throws -> Void) async throws {
            let worker = worker()
            let working = Task { try await worker.run() }
            let producer = Task { await produce() }
            do {
                try await eventually("jobs to flow") { try await succeeded() > 100 }
                try await events()
                try await eventually("more jobs after the events") { try await succeeded() > acknowledged.withLock { $0.count } / 2 }
            } catch {
                producing.store(false, ordering: .relaxed)
                await producer.value
                worker.stop()
                _ = try? await working.value
                throw error
            }
            producing.store(false, ordering: .relaxed)
            await producer.value
            let ids = acknowledged.withLock { $0 }
            try await eventually("every acknowledged job to succeed", timeout: .seconds(90)) {
                for name in queues {
                    let stats = try await queue.stats(queue: name)
                    if stats.pending + stats.active + stats.scheduled > 0 { return false }
                }
                return true
            }
            worker.stop()
            try await working.value

            // Jobs lost: 0. Every acknowledged job succeeded.
            var statuses: [String: Int] = [:]
            let list = Array(ids)
            for start in stride(from: 0, to: list.count, by: 500) {
                let chunk = list[start..<min(start + 500, list.count)]
                let replies = try await queue.redis.pipeline(
                    chunk.map { ["HGET", queue.configuration.keys($0.value).job($0.key), "status"] })
                for reply in replies { statuses[reply.string ?? "missing", default: 0] += 1 }
            }
            #expect(statuses == ["succeeded": ids.count], "acknowledged jobs by status")
            // Effects duplicated: 0. Each queue applied one effect per job it created.
            for name in queues {
                let stats = try await queue.stats(queue: name)
                let effects = try await queue.redis.send(["HGETALL", queue.configuration.keys(name).effects("e")]).fieldValues
                #expect(stats.dead == 0)
                #expect(stats.counters["succeeded:noop"] == stats.counters["enqueued:noop"], "queue \(name)")
                #expect(effects["applied"].flatMap { Int($0) } == stats.counters["succeeded:noop"], "queue \(name): one effect per job")
            }
            queue.redis.close()
        }

        func succeeded() async throws -> Int {
            var total = 0
            for name in queues { total += try await queue.stats(queue: name).total("succeeded") }
            return total
        }
    }

    /// Queue names whose slots are on three different primaries.
    static func spreadQueues(_ cluster: LocalRedisCluster, prefix: String = "topo") async throws -> [String] {
        var byNode: [Int: String] = [:]
        var index = 0
        while byNode.count < 3 && index < 200 {
            let name = "q\(index)"
            let node = try await cluster.primary(forSlot: RedisKeySlot.slot("{\(name)}"))
            if byNode[node.port] == nil { byNode[node.port] = name }
            index += 1
        }
        return byNode.values.sorted()
    }

    @Test(.timeLimit(.minutes(4))) func onAClusterJobsSurviveASlotMoveAFailoverAndAKilledPrimary() async throws {
        let cluster = try await LocalRedisCluster.start()
        do {
            let queues = try await Self.spreadQueues(cluster)
            let run = try Run(url: cluster.url, queues: queues)
            // Each queue on its own primary, as `entitle queues` shows it.
            var nodes = Set<String>()
            for name in queues { nodes.insert(try await run.queue.stats(queue: name).node ?? "") }
            #expect(nodes.count == 3)
            try await run.run {
                // 1. The first queue's slot moves to the second queue's primary, keys in batches (ASK meanwhile).
                let target = try await cluster.primary(forSlot: RedisKeySlot.slot("{\(queues[1])}"))
                try await cluster.migrate(slot: RedisKeySlot.slot("{\(queues[0])}"), to: target, batch: 20, pause: .milliseconds(30))
                #expect(try await run.queue.stats(queue: queues[0]).node == target.address)
                try await Task.sleep(for: .milliseconds(500))
                // 2. The second queue's replica takes over gracefully.
                let second = try await cluster.primary(forSlot: RedisKeySlot.slot("{\(queues[1])}"))
                let replica = try await cluster.replica(of: second)
                try await cluster.failover(to: replica)
                try await Task.sleep(for: .milliseconds(500))
                // 3. The third queue's primary dies (kill -9); its replica takes over; it comes back as a replica.
                let third = try await cluster.primary(forSlot: RedisKeySlot.slot("{\(queues[2])}"))
                let before = try await run.queue.stats(queue: queues[2]).total("succeeded")
                let clock = ContinuousClock()
                let killed = clock.now
                await third.kill()
                try await eventually("jobs of the killed primary's queue to run again", timeout: .seconds(60)) {
                    (try? await run.queue.stats(queue: queues[2]).total("succeeded")).map { $0 > before + 8 } ?? false
                }
                print("cluster queue: jobs ran again \(clock.now - killed) after kill -9 of a primary (node timeout 1.5 s)")
                try await third.restart()
                try await cluster.waitUntilHealthy(primaries: 3, replicas: 3)
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test(.timeLimit(.minutes(3))) func onSentinelJobsSurviveAKilledPrimary() async throws {
        let group = try await LocalSentinelGroup.start()
        do {
            let run = try Run(url: group.url, queues: ["default", "other"])
            try await run.run {
                let primary = try await group.primary()
                let before = try await run.succeeded()
                let clock = ContinuousClock()
                let killed = clock.now
                await primary.kill()
                try await eventually("jobs to run again on the new primary", timeout: .seconds(60)) {
                    (try? await run.succeeded()).map { $0 > before + 8 } ?? false
                }
                print("sentinel queue: jobs ran again \(clock.now - killed) after kill -9 of the primary (down-after 1 s)")
                #expect(try await group.primary().port != primary.port)
            }
        } catch {
            await group.stop()
            throw error
        }
        await group.stop()
    }
}
