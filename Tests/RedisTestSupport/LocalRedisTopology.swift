import DurationUnits
import Foundation
import LocalProcesses
import Logging
import RedisClient
import Synchronization

/// Real local deployments for tests, from Debian's redis-server and redis-cli: a Redis
/// Cluster (`redis-cli --cluster create`) and a primary with replicas watched by sentinels
/// (`redis-server --sentinel`). Every process listens on a free loopback port, and every
/// process started is killed at `stop()` and, whatever happens, when the test process exits.
public final class LocalRedisNode: Sendable {
    public let port: Int
    public let directory: URL
    private let current: Mutex<ChildProcess>
    private let arguments: [String]
    private var process: ChildProcess { current.withLock { $0 } }

    private init(process: ChildProcess, arguments: [String], port: Int, directory: URL) {
        self.current = Mutex(process)
        self.arguments = arguments
        self.port = port
        self.directory = directory
    }

    /// Starts the server again after `kill()`, with the same settings and files (a cluster
    /// node rejoins as a replica of whoever took its slots).
    public func restart() async throws {
        guard !isRunning else { return }
        let process = try ChildProcess(arguments[0], Array(arguments.dropFirst()))
        LocalRedisProcesses.started(process.pid)
        current.withLock { $0 = process }
        try await eventually("redis-server on \(port) to answer again", timeout: .seconds(20)) {
            (try? await self.send(["PING"]))?.string == "PONG"
        }
    }

    /// Starts a server on a free port and returns once it answers; a port taken between
    /// choosing and binding it (the server exits) means another try on another port.
    static func start(_ arguments: [String], directory: URL, sentinel: Bool = false) async throws -> LocalRedisNode {
        guard let binary = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first(where: FileManager.default.isExecutableFile)
        else { throw SpawnError(message: "redis-server not found (apt-get install redis-server)") }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for _ in 0..<5 {
            let port = try LocalRedisServer.freePort()
            var all = arguments
            if sentinel { all.append("--sentinel") }
            // The cluster bus would listen on port + 10000, which may be taken or out of range.
            if arguments.contains("--cluster-enabled") { all += ["--cluster-port", String(try LocalRedisServer.freePort())] }
            all += [
                "--port", String(port), "--bind", "127.0.0.1", "--dir", directory.path, "--daemonize", "no",
                "--logfile", directory.appendingPathComponent("redis.log").path,
            ]
            let process = try ChildProcess(binary, all)
            LocalRedisProcesses.started(process.pid)
            let node = LocalRedisNode(process: process, arguments: [binary] + all, port: port, directory: directory)
            let deadline = ContinuousClock.now + .seconds(20)
            while process.isRunning && ContinuousClock.now < deadline {
                if (try? await node.send(["PING"]))?.string == "PONG" { return node }
                try await Task.sleep(for: .milliseconds(20))
            }
            await node.kill()
        }
        throw SpawnError(message: "redis-server did not start (log in \(directory.path))")
    }

    public var address: String { "127.0.0.1:\(port)" }
    public var pid: Int32 { process.pid }
    public var isRunning: Bool { process.isRunning }

    /// kill -9: no shutdown, no last writes.
    public func kill() async {
        process.signal(SIGKILL)
        _ = try? await process.wait(timeout: .seconds(10))
        LocalRedisProcesses.stopped(process.pid)
    }

    public func connection(_ name: String = "admin") -> RedisConnection {
        RedisConnection(
            configuration: RedisConfiguration(
                host: "127.0.0.1", port: port, connectTimeout: .milliseconds(500), commandTimeout: .seconds(10),
                reconnectTimeout: .seconds(2)),
            name: name, logger: TestRedis.logger)
    }

    /// Sends one command on a short-lived connection.
    @discardableResult
    public func send(_ command: [String]) async throws -> RedisReply {
        let connection = connection()
        defer { Task { await connection.disconnect() } }
        return try await connection.send(command)
    }

}

/// One topology at a time: each is six servers (plus workers), and the suite shares two cores with timing-sensitive end-to-end tests.
actor TopologySlots {
    static let shared = TopologySlots(1)
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []
    init(_ count: Int) { free = count }

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { free += 1 } else { waiting.removeFirst().resume() }
    }
}

/// Pids of servers tests started, killed when the test process exits if a test did not.
enum LocalRedisProcesses {
    private static let pids = Mutex<Set<Int32>>([])
    private static let installed = Mutex(false)

    static func started(_ pid: Int32) {
        pids.withLock { _ = $0.insert(pid) }
        let first = installed.withLock { installed in
            defer { installed = true }
            return !installed
        }
        if first { atexit { LocalRedisProcesses.killAll() } }
    }

    static func stopped(_ pid: Int32) { pids.withLock { _ = $0.remove(pid) } }

    static func killAll() {
        for pid in pids.withLock({ $0 }) { Foundation.kill(pid, SIGKILL) }
    }
}

/// A Redis Cluster of `primaries` primaries with `replicas` replicas each, on loopback.
public final class LocalRedisCluster: Sendable {
    public let nodes: [LocalRedisNode]
    private let directory: URL
    private let stopped = Mutex(false)

    /// `redis+cluster://` with every node as a seed.
    public var url: String { "redis+cluster://" + nodes.map(\.address).joined(separator: ",") }

    /// Starts the servers, creates the cluster and waits until every slot is served and
    /// every replica is in sync.
    /// - Parameter nodeTimeout: `cluster-node-timeout`: how long a primary may be silent
    ///   before its replica takes over.
    public static func start(
        primaries: Int = 3, replicas: Int = 1, nodeTimeout: Duration = .milliseconds(1500)
    ) async throws
        -> LocalRedisCluster
    {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("entitle-cluster-\(UUID().uuidString.prefix(8))")
        var nodes: [LocalRedisNode] = []
        let cluster: LocalRedisCluster
        await TopologySlots.shared.acquire()
        do {
            for index in 0..<(primaries * (1 + replicas)) {
                nodes.append(
                    try await LocalRedisNode.start(
                        [
                            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout",
                            String(nodeTimeout.components.seconds * 1000 + nodeTimeout.components.attoseconds / 1_000_000_000_000_000),
                            "--cluster-replica-validity-factor", "0", "--cluster-allow-replica-migration", "no",
                            "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
                            "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                        ], directory: directory.appendingPathComponent("node-\(index)")))
            }
            cluster = LocalRedisCluster(nodes: nodes, directory: directory)
        } catch {
            for node in nodes { await node.kill() }
            await TopologySlots.shared.release()
            throw error
        }
        do {
            let created = try await ChildProcess.run(
                "/usr/bin/redis-cli",
                ["--cluster", "create"] + nodes.map(\.address) + ["--cluster-replicas", String(replicas), "--cluster-yes"],
                timeout: .seconds(60))
            guard created.status == 0 else {
                throw SpawnError(message: "redis-cli --cluster create failed: \(created.output) \(created.errors)")
            }
            try await cluster.waitUntilHealthy(primaries: primaries, replicas: primaries * replicas)
            return cluster
        } catch {
            await cluster.stop()
            throw error
        }
    }

    /// One cluster-mode server serving every slot: behind a plain `redis://` URL, what a
    /// sharded endpoint or a slot-checking proxy is to the client (its own replies say
    /// `CROSSSLOT` to keys across slots in one command or script).
    public static func startOneNode() async throws -> LocalRedisCluster {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("entitle-shard-\(UUID().uuidString.prefix(8))")
        await TopologySlots.shared.acquire()
        let cluster: LocalRedisCluster
        do {
            let node = try await LocalRedisNode.start(
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"],
                directory: directory)
            cluster = LocalRedisCluster(nodes: [node], directory: directory)
        } catch {
            await TopologySlots.shared.release()
            throw error
        }
        do {
            _ = try await cluster.nodes[0].send(["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
            try await cluster.waitUntilHealthy(primaries: 1, replicas: 0)
            return cluster
        } catch {
            await cluster.stop()
            throw error
        }
    }

    private init(nodes: [LocalRedisNode], directory: URL) {
        self.nodes = nodes
        self.directory = directory
    }

    /// Waits until every live node says `cluster_state:ok`, there are `primaries` primaries
    /// and `replicas` replicas in all, and every replica's link is up.
    public func waitUntilHealthy(primaries: Int, replicas: Int, timeout: Duration = .seconds(60)) async throws {
        try await eventually("the cluster to be healthy", timeout: timeout) {
            for node in self.nodes where node.isRunning {
                guard let info = try? await node.send(["CLUSTER", "INFO"]).string, info.contains("cluster_state:ok") else { return false }
            }
            let roles = try await self.roles()
            guard roles.primaries.count == primaries else { return false }
            for replica in roles.replicas {
                guard let info = try? await replica.send(["INFO", "replication"]).string, info.contains("master_link_status:up") else {
                    return false
                }
            }
            return roles.replicas.count == replicas
        }
    }

    /// The live nodes by role, as the nodes themselves say (`ROLE`).
    public func roles() async throws -> (primaries: [LocalRedisNode], replicas: [LocalRedisNode]) {
        var primaries: [LocalRedisNode] = []
        var replicas: [LocalRedisNode] = []
        for node in nodes where node.isRunning {
            guard let role = try? await node.send(["ROLE"]).array?.first?.string else { continue }
            if role == "master" {
                primaries.append(node)
            } else {
                replicas.append(node)
            }
        }
        return (primaries, replicas)
    }

    /// The node serving `key`'s slot now.
    public func primary(forKey key: String) async throws -> LocalRedisNode {
        let slot = try await anyNode().send(["CLUSTER", "KEYSLOT", key]).int ?? -1
        return try await primary(forSlot: slot)
    }

    public func primary(forSlot slot: Int) async throws -> LocalRedisNode {
        let shards = try await anyNode().send(["CLUSTER", "SLOTS"]).array ?? []
        for range in shards {
            guard let items = range.array, items.count >= 3, let start = items[0].int, let end = items[1].int, (start...end).contains(slot),
                let port = items[2].array?[1].int, let node = nodes.first(where: { $0.port == port })
            else { continue }
            return node
        }
        throw SpawnError(message: "no node serves slot \(slot)")
    }

    /// The replica of `primary` (its first one).
    public func replica(of primary: LocalRedisNode) async throws -> LocalRedisNode {
        let reply = try await primary.send(["ROLE"]).array ?? []
        guard reply.count >= 3, let first = reply[2].array?.first?.array, first.count >= 2,
            let port = first[1].int ?? Int(first[1].string ?? ""),
            let node = nodes.first(where: { $0.port == port })
        else { throw SpawnError(message: "\(primary.address) has no replica") }
        return node
    }

    /// A graceful failover: `CLUSTER FAILOVER` on `replica`, sent again every 3 s until it
    /// is a primary (a manual failover that times out is simply abandoned by the server).
    public func failover(to replica: LocalRedisNode) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(45)
        while clock.now < deadline {
            _ = try? await replica.send(["CLUSTER", "FAILOVER"])
            let asked = clock.now
            while clock.now - asked < .seconds(3) {
                if (try? await replica.send(["ROLE"]).array?.first?.string) == "master" { return }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        throw SpawnError(message: "\(replica.address) did not take over")
    }

    public func anyNode() async throws -> LocalRedisNode {
        guard let node = nodes.first(where: \.isRunning) else { throw SpawnError(message: "no cluster node runs") }
        return node
    }

    /// Moves `slot` from its primary to `target` the way `redis-cli --cluster reshard`
    /// does: IMPORTING on the target, MIGRATING on the source, MIGRATE the keys in batches
    /// (`pause` between batches, so clients meet ASK meanwhile), then NODE on both.
    public func migrate(slot: Int, to target: LocalRedisNode, batch: Int = 10, pause: Duration = .milliseconds(20)) async throws {
        let source = try await primary(forSlot: slot)
        guard source.port != target.port else { return }
        let sourceID = try await source.send(["CLUSTER", "MYID"]).string ?? ""
        let targetID = try await target.send(["CLUSTER", "MYID"]).string ?? ""
        try await target.send(["CLUSTER", "SETSLOT", String(slot), "IMPORTING", sourceID])
        try await source.send(["CLUSTER", "SETSLOT", String(slot), "MIGRATING", targetID])
        while true {
            let keys = try await source.send(["CLUSTER", "GETKEYSINSLOT", String(slot), String(batch)]).array?.compactMap(\.string) ?? []
            if keys.isEmpty { break }
            try await source.send(["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "REPLACE", "KEYS"] + keys)
            try await Task.sleep(for: pause)
        }
        try await target.send(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID])
        try await source.send(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID])
        for node in nodes where node.isRunning && node.port != source.port && node.port != target.port {
            _ = try? await node.send(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID])
        }
    }

    /// Kills every node and removes their files.
    public func stop() async {
        for node in nodes where node.isRunning { await node.kill() }
        try? FileManager.default.removeItem(at: directory)
        if stopped.withLock({ stopped in
            defer { stopped = true }; return !stopped
        }) {
            await TopologySlots.shared.release()
        }
    }
}

/// One primary, `replicas` replicas and `sentinels` sentinels watching them as `name`.
public final class LocalSentinelGroup: Sendable {
    public let name: String
    public let servers: [LocalRedisNode]
    public let sentinels: [LocalRedisNode]
    private let directory: URL
    private let stopped = Mutex(false)

    public var url: String { "redis+sentinel://" + sentinels.map(\.address).joined(separator: ",") + "/" + name }

    public static func start(
        name: String = "entitle", replicas: Int = 2, sentinels: Int = 3, downAfter: Duration = .milliseconds(1000)
    )
        async throws -> LocalSentinelGroup
    {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("entitle-sentinel-\(UUID().uuidString.prefix(8))")
        var servers: [LocalRedisNode] = []
        var watchers: [LocalRedisNode] = []
        await TopologySlots.shared.acquire()
        let common = [
            "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--repl-diskless-sync", "yes",
            "--repl-diskless-sync-delay", "0",
        ]
        do {
            let primary = try await LocalRedisNode.start(common, directory: directory.appendingPathComponent("primary"))
            servers.append(primary)
            let primaryPort = primary.port
            for index in 0..<replicas {
                servers.append(
                    try await LocalRedisNode.start(
                        common + ["--replicaof", "127.0.0.1", String(primaryPort)],
                        directory: directory.appendingPathComponent("replica-\(index)")))
            }
            let downAfterMs = downAfter.components.seconds * 1000 + downAfter.components.attoseconds / 1_000_000_000_000_000
            for index in 0..<sentinels {
                let folder = directory.appendingPathComponent("sentinel-\(index)")
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                let config = folder.appendingPathComponent("sentinel.conf")
                try """
                sentinel monitor \(name) 127.0.0.1 \(primaryPort) \(sentinels / 2 + 1)
                sentinel down-after-milliseconds \(name) \(downAfterMs)
                sentinel failover-timeout \(name) 5000
                sentinel parallel-syncs \(name) \(replicas)

                """.write(to: config, atomically: true, encoding: .utf8)
                watchers.append(try await LocalRedisNode.start([config.path], directory: folder, sentinel: true))
            }
        } catch {
            for node in servers + watchers { await node.kill() }
            await TopologySlots.shared.release()
            throw error
        }
        let group = LocalSentinelGroup(name: name, servers: servers, sentinels: watchers, directory: directory)
        do {
            // Ready: every sentinel knows the replicas and the other sentinels (needed for a quorum).
            try await eventually("the sentinels to see each other and the replicas", timeout: .seconds(60)) {
                for sentinel in watchers {
                    let fields = try await sentinel.send(["SENTINEL", "MASTER", name]).fieldValues
                    guard fields["num-slaves"] == String(replicas), fields["num-other-sentinels"] == String(sentinels - 1) else {
                        return false
                    }
                }
                return true
            }
            return group
        } catch {
            await group.stop()
            throw error
        }
    }

    private init(name: String, servers: [LocalRedisNode], sentinels: [LocalRedisNode], directory: URL) {
        self.name = name
        self.servers = servers
        self.sentinels = sentinels
        self.directory = directory
    }

    /// The server that says it is the primary now.
    public func primary() async throws -> LocalRedisNode {
        for server in servers where server.isRunning {
            if (try? await server.send(["ROLE"]).array?.first?.string) == "master" { return server }
        }
        throw SpawnError(message: "no primary")
    }

    public func stop() async {
        for node in servers + sentinels where node.isRunning { await node.kill() }
        try? FileManager.default.removeItem(at: directory)
        if stopped.withLock({ stopped in
            defer { stopped = true }; return !stopped
        }) {
            await TopologySlots.shared.release()
        }
    }
}
