import Logging
import RedisClient

/// Where a migration reads and writes. On one server (or Sentinel's primary) one connection
/// scans and writes. On a Redis Cluster each primary is scanned on a connection of its own
/// (SCAN walks one server) and every write goes through the cluster client, to whichever
/// node serves its key's slot.
struct MigrationRedis {
    /// Every read and write of a key.
    let redis: RedisConnectionPool
    /// One connection per server that holds keys: the server, or each primary of a cluster.
    let scanned: [RedisConnectionPool]
    /// Whether keys of different slots are on different servers: no command may name two.
    var isCluster: Bool { scanned.first.map { $0 !== redis } ?? false }

    static func connect(_ options: RedisOptions, logger: Logger) async throws -> MigrationRedis {
        let configuration = try RedisConfiguration(url: options.redisURL)
        let redis = RedisConnectionPool(configuration: configuration, maximumConnections: 1, logger: logger)
        do {
            guard case .cluster(let seeds) = configuration.topology else {
                // One node of a cluster behind a plain address would refuse every move across slots.
                // A server that refuses INFO (an ACL without @dangerous, a proxy) is taken for one server.
                if try await redis.pipeline([["INFO", "cluster"]])[0].string?.contains("cluster_enabled:1") == true {
                    throw CommandFailure(
                        "\(configuration.displayAddress) is a Redis Cluster node: give the cluster's redis+cluster:// address")
                }
                return MigrationRedis(redis: redis, scanned: [redis])
            }
            // The cluster's view from the first seed that answers (one may be the node that failed).
            var view: (nodes: String, asked: RedisConfiguration.Address)?
            var unreachable: [String] = []
            for seed in seeds where view == nil {
                let node = RedisConnectionPool(configuration: Self.node(seed, of: configuration), maximumConnections: 1, logger: logger)
                defer { node.close() }
                do {
                    view = (try await node.send(["CLUSTER", "NODES"]).checked().string ?? "", seed)
                } catch {
                    unreachable.append("\(seed): \(error)")
                }
            }
            guard let view else { throw CommandFailure("no seed of the cluster answered: \(unreachable.joined(separator: "; "))") }
            let (primaries, served) = Self.primaries(in: view.nodes, asked: view.asked)
            // A primary that failed (and has no replica promoted yet) still holds its keys: a run
            // that skipped it would say it moved everything.
            guard served == 16384 else {
                throw CommandFailure(
                    "the cluster's reachable primaries serve \(served) of its 16384 slots: run it again once the cluster is whole")
            }
            return MigrationRedis(
                redis: redis,
                scanned: primaries.map {
                    RedisConnectionPool(configuration: Self.node($0, of: configuration), maximumConnections: 1, logger: logger)
                })
        } catch {
            redis.close()
            throw error
        }
    }

    /// The cluster's settings (credentials, timeouts) for one of its nodes alone.
    static func node(_ address: RedisConfiguration.Address, of cluster: RedisConfiguration) -> RedisConfiguration {
        var node = cluster
        node.host = address.host
        node.port = address.port
        node.topology = .standalone
        // A seed that does not answer is passed over at once, not waited for.
        node.reconnectTimeout = min(node.reconnectTimeout, .seconds(2))
        return node
    }

    /// The primaries that serve slots, and how many slots they serve, from `CLUSTER NODES`
    /// (`id host:port@bus flags primary ping pong epoch link slot...`) as the node at `asked`
    /// answered: a node that never met another names itself with no host.
    static func primaries(
        in nodes: String, asked: RedisConfiguration.Address
    ) -> (primaries: [RedisConfiguration.Address], slots: Int) {
        var (primaries, slots) = ([RedisConfiguration.Address](), 0)
        for line in nodes.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 8 else { continue }
            let flags = fields[2].split(separator: ",")
            guard flags.contains("master"), !flags.contains("fail"), !flags.contains("noaddr") else { continue }
            let address = fields[1].prefix { $0 != "@" && $0 != "," }
            guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else { continue }
            let host = String(address[..<colon])
            primaries.append(host.isEmpty && flags.contains("myself") ? asked : RedisConfiguration.Address(host: host, port: port))
            // `first-last` or `slot`; `[slot->-id]` and `[slot-<-id]` are slots on the move, counted where they are served.
            for range in fields[8...] where !range.hasPrefix("[") {
                let bounds = range.split(separator: "-").compactMap { Int($0) }
                if bounds.count == 2 { slots += bounds[1] - bounds[0] + 1 } else if bounds.count == 1 { slots += 1 }
            }
        }
        return (primaries, slots)
    }

    /// Calls `body` with every key matching `pattern` on every server (SCAN may give a key
    /// twice: `body` must be safe to repeat).
    func scan(_ pattern: String, _ body: (String) async throws -> Void) async throws {
        for server in scanned {
            var cursor = "0"
            repeat {
                let parts = try await server.send(["SCAN", cursor, "MATCH", pattern, "COUNT", "1000"]).checked().array ?? []
                cursor = parts.first?.string ?? "0"
                for key in (parts.last?.array ?? []).compactMap(\.string) { try await body(key) }
            } while cursor != "0"
        }
    }

    func close() {
        for server in scanned where server !== redis { server.close() }
        redis.close()
    }
}
