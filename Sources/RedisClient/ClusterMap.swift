import Logging

/// Which primary serves each of a Redis Cluster's 16384 slots, as one node reports it.
struct ClusterMap: Sendable, Equatable {
    typealias Address = RedisConfiguration.Address

    var primaries: [Address] = []
    /// Slot -> index in `primaries`; -1 for a slot no node serves.
    var slots = [Int16](repeating: -1, count: RedisKeySlot.count)
    /// Every node named, replicas too.
    var nodes: [Address] = []

    /// Asks `address` for `CLUSTER SHARDS` (Redis 7), or `CLUSTER SLOTS` on older servers.
    static func read(from address: Address, configuration: RedisConfiguration, logger: Logger) async throws -> ClusterMap {
        let connection = RedisConnection(configuration: configuration, name: "cluster-map", logger: logger)
        defer { Task { await connection.disconnect() } }
        let map: ClusterMap
        do {
            map = try parseShards(try await connection.send(["CLUSTER", "SHARDS"]), asked: address)
        } catch let error as RedisError where error.code == .serverError && error.message.lowercased().contains("unknown subcommand") {
            map = try parseSlots(try await connection.send(["CLUSTER", "SLOTS"]), asked: address)
        }
        guard !map.primaries.isEmpty else { throw RedisError(.unexpectedReply, "\(address) serves no cluster slot") }
        return map
    }

    /// `CLUSTER SHARDS`: per shard `slots` (start, end pairs) and `nodes` (field/value arrays).
    static func parseShards(_ reply: RedisReply, asked: Address) throws -> ClusterMap {
        guard let shards = reply.array else { throw RedisError(.unexpectedReply, "CLUSTER SHARDS: not an array") }
        var map = ClusterMap()
        for shard in shards {
            let fields = pairs(shard)
            let ranges = (fields["slots"]?.array ?? []).compactMap(\.int)
            var primary: Address?
            for node in fields["nodes"]?.array ?? [] {
                let info = pairs(node)
                guard let port = info["port"]?.int ?? info["tls-port"]?.int else { continue }
                var host = info["endpoint"]?.string ?? ""
                if host.isEmpty || host == "?" { host = info["ip"]?.string ?? "" }
                if host.isEmpty || host == "?" { host = asked.host }
                let address = Address(host: host, port: port)
                map.nodes.append(address)
                if info["role"]?.string == "master" { primary = address }
            }
            guard let primary, ranges.count >= 2 else { continue }
            map.assign(ranges, to: primary)
        }
        return map
    }

    /// `CLUSTER SLOTS`: [start, end, [host, port, id], replicas...] per range.
    static func parseSlots(_ reply: RedisReply, asked: Address) throws -> ClusterMap {
        guard let ranges = reply.array else { throw RedisError(.unexpectedReply, "CLUSTER SLOTS: not an array") }
        var map = ClusterMap()
        for range in ranges {
            guard let items = range.array, items.count >= 3, let start = items[0].int, let end = items[1].int else { continue }
            var addresses: [Address] = []
            for node in items[2...] {
                guard let parts = node.array, parts.count >= 2, let port = parts[1].int else { continue }
                let host = parts[0].string.flatMap { $0.isEmpty || $0 == "?" ? nil : $0 } ?? asked.host
                addresses.append(Address(host: host, port: port))
            }
            guard let primary = addresses.first else { continue }
            map.nodes += addresses
            map.assign([start, end], to: primary)
        }
        return map
    }

    private mutating func assign(_ ranges: [Int], to primary: Address) {
        let index: Int
        if let known = primaries.firstIndex(of: primary) { index = known } else {
            primaries.append(primary)
            index = primaries.count - 1
        }
        var offset = 0
        while offset + 1 < ranges.count {
            let start = max(0, ranges[offset])
            let end = min(RedisKeySlot.count - 1, ranges[offset + 1])
            if start <= end { for slot in start...end { slots[slot] = Int16(index) } }
            offset += 2
        }
    }

    /// A flat [field, value, ...] array as a dictionary.
    private static func pairs(_ reply: RedisReply) -> [String: RedisReply] {
        guard let items = reply.array else { return [:] }
        var result: [String: RedisReply] = [:]
        var index = 0
        while index + 1 < items.count {
            if let key = items[index].string { result[key] = items[index + 1] }
            index += 2
        }
        return result
    }
}
