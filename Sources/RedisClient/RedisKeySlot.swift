/// Redis Cluster's key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.
enum RedisKeySlot {
    static let count = 16384

    /// The slot of `key`. A hash tag is the text between the first `{` and the next `}`,
    /// when that text is not empty: `a:{q}:b` and `{q}` share a slot.
    static func slot(_ key: String) -> Int {
        var key = key
        return key.withUTF8 { slot(bytes: $0) }
    }

    static func slot(bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var start = 0
        var end = bytes.count
        if let open = bytes.firstIndex(of: UInt8(ascii: "{")) {
            var close = open + 1
            while close < bytes.count && bytes[close] != UInt8(ascii: "}") { close += 1 }
            if close < bytes.count && close > open + 1 {
                start = open + 1
                end = close
            }
        }
        var crc: UInt16 = 0
        var index = start
        while index < end {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ bytes[index])]
            index += 1
        }
        return Int(crc & 0x3FFF)
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
    /// Where a command's keys are.
    enum Spec {
        case none
        /// argv[1] alone (most commands).
        case first
        /// argv[1...]
        case all
        /// argv[1], argv[3], ... (MSET)
        case pairs
        /// argv[1] and argv[2]
        case firstTwo
        /// argv[1..<last] (BLPOP)
        case allButLast
        /// numkeys at this index, the keys after it (EVAL at 2, ZUNION at 1)
        case counted(Int)
        /// the destination at 1, then numkeys at 2 (ZUNIONSTORE)
        case destinationAndCounted
        /// after STREAMS, the first half (XREAD)
        case streams
        /// argv[2] (MEMORY USAGE key, OBJECT ENCODING key)
        case second
    }

    static func keys(_ command: [String]) -> [String] {
        var keys: [String] = []
        forEachKey(command) { keys.append($0) }
        return keys
    }

    /// The slot every key of `command` is in; `nil` for a command without keys.
    /// - Throws: `RedisError(.crossSlot)` when its keys span slots.
    static func slot(_ command: [String]) throws -> Int? {
        var slot: Int?
        var crosses = false
        forEachKey(command) { key in
            let this = RedisKeySlot.slot(key)
            if let slot, slot != this { crosses = true }
            slot = this
        }
        if crosses {
            throw RedisError(
                .crossSlot,
                "\(command[0].uppercased()) names keys in different cluster slots; give keys one hash tag ({...}) or split the command")
        }
        return slot
    }

    static func forEachKey(_ command: [String], _ body: (String) -> Void) {
        guard let name = command.first else { return }
        let count = command.count
        func each(_ range: StrideTo<Int>) { for index in range where index < count { body(command[index]) } }
        func counted(at index: Int) {
            guard index < count, let n = Int(command[index]), n > 0, index + 1 + n <= count else { return }
            each(stride(from: index + 1, to: index + 1 + n, by: 1))
        }
        switch specs[name] ?? specs[name.uppercased()] ?? .first {
        case .none: return
        case .first: if count > 1 { body(command[1]) }
        case .all: each(stride(from: 1, to: count, by: 1))
        case .pairs: each(stride(from: 1, to: count, by: 2))
        case .firstTwo: each(stride(from: 1, to: min(3, count), by: 1))
        case .allButLast: each(stride(from: 1, to: count - 1, by: 1))
        case .counted(let index): counted(at: index)
        case .destinationAndCounted:
            if count > 1 { body(command[1]) }
            counted(at: 2)
        case .streams:
            guard let streams = command.firstIndex(where: { $0.uppercased() == "STREAMS" }) else { return }
            each(stride(from: streams + 1, to: streams + 1 + (count - streams - 1) / 2, by: 1))
        case .second: if count > 2 { body(command[2]) }
        }
    }

    /// By command name, upper and lower case (others are uppercased first). Commands not
    /// listed take argv[1] as their one key.
    private static let specs: [String: Spec] = {
        var table: [String: Spec] = [:]
        let keyless = [
            "PING", "ECHO", "INFO", "TIME", "DBSIZE", "FLUSHALL", "FLUSHDB", "CLIENT", "CONFIG", "CLUSTER", "SCRIPT", "FUNCTION",
            "COMMAND", "SELECT", "AUTH", "HELLO", "ROLE", "SHUTDOWN", "DEBUG", "SLOWLOG", "LATENCY", "ACL", "WAIT", "PUBLISH",
            "SPUBLISH", "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBSUB", "SCAN", "RANDOMKEY", "KEYS", "SENTINEL",
            "SAVE", "BGSAVE", "BGREWRITEAOF", "LASTSAVE", "READONLY", "READWRITE", "ASKING", "MULTI", "EXEC", "DISCARD", "UNWATCH",
            "MONITOR", "SWAPDB", "LOLWUT", "REPLICAOF", "SLAVEOF", "FAILOVER", "RESET", "QUIT",
        ]
        for name in keyless { table[name] = Spec.none }
        for name in ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "BLMPOP", "BZMPOP"] { table[name] = .counted(2) }
        for name in ["ZUNION", "ZINTER", "ZDIFF", "SINTERCARD", "ZINTERCARD", "LMPOP", "ZMPOP"] { table[name] = .counted(1) }
        for name in [
            "DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH", "SDIFF", "SINTER", "SUNION", "PFCOUNT", "PFMERGE", "SDIFFSTORE",
            "SINTERSTORE", "SUNIONSTORE",
        ] { table[name] = .all }
        for name in ["MSET", "MSETNX"] { table[name] = .pairs }
        for name in ["LMOVE", "BLMOVE", "RPOPLPUSH", "BRPOPLPUSH", "SMOVE", "RENAME", "RENAMENX", "COPY", "LCS", "ZRANGESTORE", "GEOSEARCHSTORE"] {
            table[name] = .firstTwo
        }
        for name in ["BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"] { table[name] = .allButLast }
        for name in ["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"] { table[name] = .destinationAndCounted }
        for name in ["XREAD", "XREADGROUP"] { table[name] = .streams }
        for name in ["MEMORY", "OBJECT", "XINFO"] { table[name] = .second }
        for (name, spec) in table { table[name.lowercased()] = spec }
        // The common one-key commands, so the lookup never needs an uppercased copy.
        for name in [
            "GET", "SET", "HGET", "HSET", "HMGET", "HGETALL", "HDEL", "HINCRBY", "INCR", "INCRBY", "EXPIRE", "PEXPIRE", "LPUSH", "RPUSH",
            "LRANGE", "LLEN", "LINDEX", "LREM", "ZADD", "ZREM", "ZRANGE", "ZREVRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCARD", "SADD",
            "SREM", "SMEMBERS", "TTL", "PTTL", "TYPE",
        ] {
            table[name] = .first
            table[name.lowercased()] = .first
        }
        return table
    }()
}
