import DurationUnits
import Foundation
import RedisClient
import RedisTestSupport
import Testing

/// Several worker processes, SIGKILLed again and again (every 300 ms) while they run 20,000
/// jobs of 12 ms each (5 s of work for 48 slots: 90% of it spans about 10 kills), whose
/// effect is applied once per job id. Nothing may be lost, no effect may happen twice, and
/// a killed worker's claimed jobs must be back in pending within 15 s.
/// On a cluster the same, and the primary holding the queue is killed -9 mid-run (its
/// replica takes over; it comes back as a replica).
@Suite(.serialized) struct CrashTests {
    static let jobs = 20_000
    static let workers = 3

    @Test(.timeLimit(.minutes(10))) func sigkilledWorkersLoseNothingAndEffectsHappenOnce() async throws {
        try await crashRun(try await CLI("crash"))
    }

    @Test(.timeLimit(.minutes(10))) func onAClusterWithItsPrimaryKilledToo() async throws {
        let cluster = try await LocalRedisCluster.start()
        do {
            // WAIT for a replica: the killed primary cannot take acknowledged writes with it.
            let cli = try await CLI("crash-cluster", url: cluster.url + "?replicas=1&replicaTimeoutMs=200")
            let primary = try await cluster.primary(forKey: "{default}")
            try await crashRun(cli) { kills in
                guard kills == 3 else { return nil }
                let before = try await succeeded(cli)
                let clock = ContinuousClock()
                let killed = clock.now
                await primary.kill()
                try await eventually("jobs to succeed again after the primary died", timeout: .seconds(60)) {
                    (try? await succeeded(cli)).map { $0 > before } ?? false
                }
                let recovery = (clock.now - killed).seconds
                try await primary.restart()
                return recovery
            }
            // `entitle queues` names the node that serves the queue now: the replica that took over.
            let node = try await cluster.primary(forKey: "{default}")
            #expect(node.port != primary.port)
            #expect(try await cli.queueStats()["node"] as? String == node.address)
            try await cluster.waitUntilHealthy(primaries: 3, replicas: 3)
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// Runs the crash test on `cli`'s Redis; `event` runs after each kill and may report a
    /// recovery time of its own (printed).
    private func crashRun(_ cli: CLI, event: @Sendable (Int) async throws -> Double? = { _ in nil }) async throws {
        let redis = cli.redis
        var ids: [String] = []
        for _ in 0..<(Self.jobs / 10_000) {
            let result = try await cli.run(["enqueue", "noop", "--payload", #"{"effect":"crash","sleepMs":12}"#, "--count", "10000"])
            ids += result.output.split(separator: "\n").map(String.init)
        }
        #expect(ids.count == Self.jobs)

        var processes = try (0..<Self.workers).map { _ in try cli.start(["worker", "--queues", "default=16"]) }
        var recoveries: [Task<Double, any Error>] = []
        var kills = 0
        let began = ContinuousClock.now
        while try await succeeded(cli) < Self.jobs * 9 / 10, ContinuousClock.now - began < .seconds(180) {
            try await Task.sleep(for: .milliseconds(300))
            let victim = kills % Self.workers
            let pid = processes[victim].pid
            // Its consumer ids (host:pid:queue:random) as registered before the kill.
            let consumers =
                try await retryingLost { try await redis.send(["ZRANGE", cli.key("default", "consumers"), "0", "-1"]) }.array?.compactMap(
                    \.string)
                ?? []
            let its = consumers.filter { $0.contains(":\(pid):") }
            processes[victim].signal(SIGKILL)
            _ = try await processes[victim].wait()
            kills += 1
            let killedAt = ContinuousClock.now
            recoveries.append(
                Task {
                    // Recovered: the consumer is gone from the registry and its active list is empty.
                    try await eventually("pid \(pid)'s jobs back in pending", timeout: .seconds(30)) {
                        for consumer in its {
                            guard
                                let replies = try? await redis.pipeline([
                                    ["ZSCORE", cli.key("default", "consumers"), consumer],
                                    ["LLEN", cli.key("default", "active:\(consumer)")],
                                ])
                            else { return false }
                            if !replies[0].isNull || replies[1].int != 0 { return false }
                        }
                        return true
                    }
                    return (ContinuousClock.now - killedAt).seconds
                })
            processes[victim] = try cli.start(["worker", "--queues", "default=16"])
            if let recovery = try await event(kills) {
                print("crash test: jobs ran again \(String(format: "%.1f", recovery)) s after kill -9 of the queue's primary")
            }
        }
        try await eventually("every job to succeed", reaches: Self.jobs) { try await succeeded(cli) }
        // Recovery needs a live worker's reaper: wait for it before stopping them.
        var slowest = 0.0
        for recovery in recoveries { slowest = max(slowest, try await recovery.value) }
        for process in processes { process.signal(SIGTERM) }
        for process in processes { #expect(try await process.wait() == 0) }

        #expect(kills >= 5, "only \(kills) kills happened during the run")
        #expect(slowest <= 15, "a killed worker's jobs took \(slowest) s to return to pending")

        let stats = try await cli.queueStats()
        #expect(stats["node"] is String)
        #expect(stats["pending"] as? Int == 0 && stats["active"] as? Int == 0 && stats["scheduled"] as? Int == 0)
        #expect(stats["dead"] as? Int == 0)
        let effects = try await redis.send(["HGETALL", cli.key("default", "effects:crash")]).fieldValues
        #expect(effects["applied"] == String(Self.jobs), "every effect happened exactly once")
        let runs = Int(effects["runs"] ?? "0") ?? 0
        #expect(runs >= Self.jobs)
        var statuses: [String: Int] = [:]
        for start in stride(from: 0, to: ids.count, by: 1000) {
            let replies = try await redis.pipeline(
                ids[start..<min(start + 1000, ids.count)].map { ["HGET", cli.key("default", "job:\($0)"), "status"] })
            for reply in replies { statuses[reply.string ?? "missing", default: 0] += 1 }
        }
        #expect(statuses == ["succeeded": Self.jobs])
        print(
            "crash test (\(cli.url.hasPrefix("redis+cluster") ? "cluster" : "one server")): \(kills) SIGKILLs, \(runs - Self.jobs) handler runs repeated after kills, slowest recovery \(String(format: "%.1f", slowest)) s"
        )
    }

    private func succeeded(_ cli: CLI) async throws -> Int {
        let stats = try await retryingLost { try await cli.redis.send(["HGET", cli.key("default", "stats"), "succeeded:noop"]) }
        return stats.int ?? 0
    }
}
