import Foundation
import Logging
import RedisClient

/// `bench/cluster.sh`'s routing part: the cost of cluster routing per command. The same
/// client runs the same commands against one redis-server (standalone mode) and against a
/// one-node Redis Cluster that serves all 16384 slots (cluster mode: slot per key, map
/// lookup, redirect checks), taking turns A B A B, so drift on a shared machine hits both.
///
/// usage: cluster-bench STANDALONE_URL CLUSTER_URL [ROUNDS] [COMMANDS]
/// Prints per workload and mode the wall µs per command and the process's CPU µs per
/// command, and the paired ratios (cluster / standalone), median over rounds.
@main struct ClusterBenchmark {
    static func main() async throws {
        let arguments = CommandLine.arguments
        guard arguments.count >= 3 else {
            FileHandle.standardError.write(Data("usage: cluster-bench STANDALONE_URL CLUSTER_URL [ROUNDS] [COMMANDS]\n".utf8))
            exit(2)
        }
        let rounds = arguments.count > 3 ? Int(arguments[3]) ?? 5 : 5
        let commands = arguments.count > 4 ? Int(arguments[4]) ?? 20_000 : 20_000
        let logger = Logger(label: "cluster-bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let standalone = RedisConnectionPool(configuration: try RedisConfiguration(url: arguments[1]), maximumConnections: 4, logger: logger)
        let cluster = RedisConnectionPool(configuration: try RedisConfiguration(url: arguments[2]), maximumConnections: 4, logger: logger)
        let script = RedisScript(name: "incr-tagged", source: "return redis.call('INCR', KEYS[1])")
        let keys = (0..<1000).map { "bench:{k\($0)}:n" }

        typealias Workload = (name: String, run: @Sendable (RedisConnectionPool, Int) async throws -> Void)
        let workloads: [Workload] = [
            ("SET+GET, one at a time", { redis, n in
                for i in 0..<(n / 2) {
                    let key = keys[i % keys.count]
                    try await redis.send(["SET", key, "v"])
                    _ = try await redis.send(["GET", key])
                }
            }),
            ("EVALSHA, one at a time", { redis, n in
                for i in 0..<n { try await redis.run(script, keys: [keys[i % keys.count]], arguments: []) }
            }),
            ("GET, pipelines of 100", { redis, n in
                for start in stride(from: 0, to: n, by: 100) {
                    _ = try await redis.pipeline((start..<(start + 100)).map { ["GET", keys[$0 % keys.count]] })
                }
            }),
        ]
        // Warm up: connections, script caches, the cluster map.
        for (_, run) in workloads { try await run(standalone, 2000); try await run(cluster, 2000) }

        print("| workload | standalone µs/cmd (wall) | cluster µs/cmd (wall) | wall ratio | standalone CPU µs/cmd | cluster CPU µs/cmd | CPU ratio |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for (name, run) in workloads {
            var wall: [(Double, Double)] = []
            var cpu: [(Double, Double)] = []
            for _ in 0..<rounds {
                let a = try await measure { try await run(standalone, commands) }
                let b = try await measure { try await run(cluster, commands) }
                wall.append((a.wall, b.wall))
                cpu.append((a.cpu, b.cpu))
            }
            let n = Double(commands)
            let wallRatio = median(wall.map { $0.1 / $0.0 })
            let cpuRatio = median(cpu.map { $0.1 / $0.0 })
            print(
                String(
                    format: "| %@ | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f |", name, median(wall.map(\.0)) / n * 1e6,
                    median(wall.map(\.1)) / n * 1e6, wallRatio, median(cpu.map(\.0)) / n * 1e6, median(cpu.map(\.1)) / n * 1e6, cpuRatio))
        }
        standalone.close()
        cluster.close()
    }

    static func measure(_ body: @Sendable () async throws -> Void) async throws -> (wall: Double, cpu: Double) {
        let clock = ContinuousClock()
        let cpuBefore = processCPU()
        let start = clock.now
        try await body()
        return ((clock.now - start).seconds, processCPU() - cpuBefore)
    }

    static func processCPU() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return 0 }
        return sorted[sorted.count / 2]
    }
}
