/// Redis Cluster's key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.
enum RedisKeySlot {
    static let count = 16384

    /// The slot of `key`. A hash tag is the text between the first `{` and the next `}`,
    /// when that text is not empty: `a:{q}:b` and `{q}` share a slot.
    static func slot(_ key: String) -> Int {
        var utf8 = Array(key.utf8)
        if let open = utf8.firstIndex(of: UInt8(ascii: "{")),
            let close = utf8[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1
        {
            utf8 = Array(utf8[(open + 1)..<close])
        }
        return Int(crc16(utf8) & 0x3FFF)
    }

    static func crc16(_ bytes: [UInt8]) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes { crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)] }
        return crc
    }

    private static let table: [UInt16] = (0..<256).map { value in
        var crc = UInt16(value) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }
}

/// Which arguments of a command are keys, for routing on a cluster and for the cross-slot
/// check. Commands that take no key (PING, INFO, CLIENT, CONFIG, ...) return none and may
/// go to any node.
enum RedisCommandKeys {
    static func keys(_ command: [String]) -> [String] {
        guard let first = command.first else { return [] }
        let name = first.uppercased()
        let count = command.count
        func from(_ start: Int, to end: Int? = nil, step: Int = 1) -> [String] {
            let last = end ?? count
            guard start < last else { return [] }
            return stride(from: start, to: last, by: step).map { command[$0] }
        }
        func counted(at index: Int) -> [String] {
            guard index < count, let n = Int(command[index]), n > 0, index + 1 + n <= count else { return [] }
            return from(index + 1, to: index + 1 + n)
        }
        switch name {
        case _ where keyless.contains(name): return []
        case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO": return counted(at: 2)
        case "DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH", "SDIFF", "SINTER", "SUNION", "PFCOUNT", "PFMERGE",
            "SDIFFSTORE", "SINTERSTORE", "SUNIONSTORE":
            return from(1)
        case "MSET", "MSETNX": return from(1, step: 2)
        case "LMOVE", "BLMOVE", "RPOPLPUSH", "BRPOPLPUSH", "SMOVE", "RENAME", "RENAMENX", "COPY", "LCS", "ZRANGESTORE",
            "GEOSEARCHSTORE":
            return from(1, to: min(3, count))
        case "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX": return from(1, to: count - 1)
        case "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE": return (count > 1 ? [command[1]] : []) + counted(at: 2)
        case "ZUNION", "ZINTER", "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP": return counted(at: 1)
        case "BLMPOP", "BZMPOP": return counted(at: 2)
        case "XREAD", "XREADGROUP":
            guard let streams = command.firstIndex(where: { $0.uppercased() == "STREAMS" }) else { return [] }
            let rest = count - streams - 1
            return from(streams + 1, to: streams + 1 + rest / 2)
        case "MEMORY", "OBJECT", "XINFO":
            return count > 2 ? [command[2]] : []
        default: return count > 1 ? [command[1]] : []
        }
    }

    private static let keyless: Set<String> = [
        "PING", "ECHO", "INFO", "TIME", "DBSIZE", "FLUSHALL", "FLUSHDB", "CLIENT", "CONFIG", "CLUSTER", "SCRIPT", "FUNCTION",
        "COMMAND", "SELECT", "AUTH", "HELLO", "ROLE", "SHUTDOWN", "DEBUG", "SLOWLOG", "LATENCY", "ACL", "WAIT", "PUBLISH",
        "SPUBLISH", "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBSUB", "SCAN", "RANDOMKEY", "KEYS", "SENTINEL",
        "SAVE", "BGSAVE", "BGREWRITEAOF", "LASTSAVE", "READONLY", "READWRITE", "ASKING", "MULTI", "EXEC", "DISCARD", "UNWATCH",
        "MONITOR", "SWAPDB", "LOLWUT", "REPLICAOF", "SLAVEOF", "FAILOVER", "RESET", "QUIT",
    ]

    /// The slot every key of `command` is in; `nil` for a command without keys.
    /// - Throws: `RedisError(.crossSlot)` when its keys span slots.
    static func slot(_ command: [String]) throws -> Int? {
        let keys = keys(command)
        guard let first = keys.first else { return nil }
        let slot = RedisKeySlot.slot(first)
        for key in keys.dropFirst() where RedisKeySlot.slot(key) != slot {
            throw RedisError(
                .crossSlot,
                "\(command[0].uppercased()) names keys in different cluster slots; give keys one hash tag ({...}) or split the command")
        }
        return slot
    }
}
