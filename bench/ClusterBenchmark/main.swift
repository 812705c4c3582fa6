import Foundation
import Logging
import RedisClient

/// `bench/cluster.sh`'s routing part: the cost of cluster routing per command. The same
/// commands, taking turns in each round (so drift on a shared machine hits all three):
/// - A: the client in standalone mode against one redis-server;
/// - B: the client in standalone mode against a one-node Redis Cluster serving all 16384
///   slots (the server's own cluster-mode cost, no routing in the client);
/// - C: the client in cluster mode against that same node (slot per key, map lookup,
///   redirect checks): C against B is the client's routing cost.
///
/// usage: cluster-bench STANDALONE_URL CLUSTER_NODE_URL [ROUNDS] [COMMANDS]
///        cluster-bench --one routed|unrouted NODE_URL COMMANDS WORKLOAD(0-2)
/// (`--one` runs one mode once, for timing whole processes pairwise from outside.)
/// (CLUSTER_NODE_URL is redis://host:port of the one-node cluster.) Prints per workload
/// the wall µs and the process's CPU µs per command, and paired ratios, median over rounds.
@main struct ClusterBenchmark {
    static func main() async throws {
        let arguments = CommandLine.arguments
        if arguments.count == 6, arguments[1] == "--one" {
            try await one(routed: arguments[2] == "routed", url: arguments[3], commands: Int(arguments[4]) ?? 20_000, workload: Int(arguments[5]) ?? 0)
            return
        }
        guard arguments.count >= 3 else {
            FileHandle.standardError.write(Data("usage: cluster-bench STANDALONE_URL CLUSTER_URL [ROUNDS] [COMMANDS]\n".utf8))
            exit(2)
        }
        let rounds = arguments.count > 3 ? Int(arguments[3]) ?? 5 : 5
        let commands = arguments.count > 4 ? Int(arguments[4]) ?? 20_000 : 20_000
        let logger = Logger(label: "cluster-bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let standalone = RedisConnectionPool(configuration: try RedisConfiguration(url: arguments[1]), maximumConnections: 4, logger: logger)
        let node = try RedisConfiguration(url: arguments[2])
        let direct = RedisConnectionPool(configuration: node, maximumConnections: 4, logger: logger)
        let cluster = RedisConnectionPool(
            configuration: try RedisConfiguration(url: "redis+cluster://\(node.host):\(node.port)"), maximumConnections: 4, logger: logger)
        let workloads = Self.workloads
        // Warm up: connections, script caches, the cluster map.
        for (_, run) in workloads { for pool in [standalone, direct, cluster] { try await run(pool, 2000) } }
        try await table(workloads, standalone, direct, cluster, rounds: rounds, commands: commands)
    }

    typealias Workload = (name: String, run: @Sendable (RedisConnectionPool, Int) async throws -> Void)

    static var workloads: [Workload] {
        let script = RedisScript(name: "incr-tagged", source: "return redis.call('INCR', KEYS[1])")
        let keys = (0..<1000).map { "bench:{k\($0)}:s" }
        let counters = (0..<1000).map { "bench:{k\($0)}:n" }
        return [
            ("SET+GET, one at a time", { redis, n in
                for i in 0..<(n / 2) {
                    let key = keys[i % keys.count]
                    try await redis.send(["SET", key, "v"])
                    _ = try await redis.send(["GET", key])
                }
            }),
            ("EVALSHA, one at a time", { redis, n in
                for i in 0..<n { try await redis.run(script, keys: [counters[i % counters.count]], arguments: []) }
            }),
            ("GET, pipelines of 100", { redis, n in
                for start in stride(from: 0, to: n, by: 100) {
                    _ = try await redis.pipeline((start..<(start + 100)).map { ["GET", keys[$0 % keys.count]] })
                }
            }),
        ]
    }

    static func one(routed: Bool, url: String, commands: Int, workload: Int) async throws {
        let logger = Logger(label: "cluster-bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let node = try RedisConfiguration(url: url)
        let configuration = routed ? try RedisConfiguration(url: "redis+cluster://\(node.host):\(node.port)") : node
        let pool = RedisConnectionPool(configuration: configuration, maximumConnections: 4, logger: logger)
        try await workloads[min(max(0, workload), 2)].run(pool, commands)
        pool.close()
    }

    static func table(
        _ workloads: [Workload], _ standalone: RedisConnectionPool, _ direct: RedisConnectionPool, _ cluster: RedisConnectionPool,
        rounds: Int, commands: Int
    ) async throws {

        print(
            "| workload | A: one server, µs/cmd | B: cluster node, unrouted | C: cluster node, routed | C/B wall | client CPU µs/cmd B, C | C/B client CPU | B/A wall |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for (name, run) in workloads {
            var samples: [[(wall: Double, cpu: Double)]] = []
            for number in 0..<rounds {
                // A B C, then C B A: no mode always goes first or last.
                var round = [(wall: Double, cpu: Double)](repeating: (0, 0), count: 3)
                for mode in number % 2 == 0 ? [0, 1, 2] : [2, 1, 0] {
                    let pool = [standalone, direct, cluster][mode]
                    round[mode] = try await measure { try await run(pool, commands) }
                }
                samples.append(round)
            }
            let n = Double(commands)
            func wall(_ mode: Int) -> Double { median(samples.map { $0[mode].wall }) / n * 1e6 }
            func cpu(_ mode: Int) -> Double { median(samples.map { $0[mode].cpu }) / n * 1e6 }
            print(
                String(
                    format: "| %@ | %.2f | %.2f | %.2f | %.3f | %.2f, %.2f | %.3f | %.3f |", name, wall(0), wall(1), wall(2),
                    median(samples.map { $0[2].wall / $0[1].wall }), cpu(1), cpu(2), median(samples.map { $0[2].cpu / $0[1].cpu }),
                    median(samples.map { $0[1].wall / $0[0].wall })))
        }
        standalone.close()
        direct.close()
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
