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
            guard case .cluster = configuration.topology else {
                // One node of a cluster behind a plain address would refuse every move across slots.
                if try await redis.send(["INFO", "cluster"]).checked().string?.contains("cluster_enabled:1") == true {
                    throw CommandFailure(
                        "\(configuration.displayAddress) is a Redis Cluster node: give the cluster's redis+cluster:// address")
                }
                return MigrationRedis(redis: redis, scanned: [redis])
            }
            let nodes = try await redis.send(["CLUSTER", "NODES"]).checked().string ?? ""
            let primaries = Self.primaries(in: nodes)
            guard !primaries.isEmpty else { throw CommandFailure("the cluster names no primary that serves slots") }
            return MigrationRedis(
                redis: redis,
                scanned: primaries.map { address in
                    var node = configuration
                    node.host = address.host
                    node.port = address.port
                    node.topology = .standalone
                    return RedisConnectionPool(configuration: node, maximumConnections: 1, logger: logger)
                })
        } catch {
            redis.close()
            throw error
        }
    }

    /// The primaries that serve slots, from `CLUSTER NODES` (`id host:port@bus flags primary
    /// ping pong epoch link slot...`).
    static func primaries(in nodes: String) -> [RedisConfiguration.Address] {
        nodes.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count > 8 else { return nil }
            let flags = fields[2].split(separator: ",")
            guard flags.contains("master"), !flags.contains("fail"), !flags.contains("noaddr") else { return nil }
            let address = fields[1].prefix { $0 != "@" && $0 != "," }
            guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else { return nil }
            return RedisConfiguration.Address(host: String(address[..<colon]), port: port)
        }
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
