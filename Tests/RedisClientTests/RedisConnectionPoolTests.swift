import RedisTestSupport
import Testing

@testable import RedisClient

@Suite struct RedisConnectionPoolTests {
    @Test func manyTasksShareABoundedNumberOfConnections() async throws {
        let key = TestRedis.uniquePrefix("pool")
        let pool = RedisConnectionPool(
            configuration: try await TestRedis.configuration(), maximumConnections: 2, name: key, logger: TestRedis.logger
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 { group.addTask { try await pool.send(["INCR", key]) } }
            try await group.waitForAll()
        }
        #expect(try await pool.send(["GET", key]).int == 50)
        // 50 tasks at once, yet the server saw at most two connections of this pool.
        let clients = try await pool.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
        let names = clients.split(separator: "\n").compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("name=\(key)-") }.map { String($0.dropFirst(5)) }
        }
        #expect(!names.isEmpty && names.count <= 2, "\(names)")
        #expect(Set(names).isSubset(of: ["\(key)-1", "\(key)-2"]))
        try await pool.send(["DEL", key])
        pool.close()
        await #expect(throws: RedisError.self) { try await pool.send(["PING"]) }
    }

    /// Callers that find the one connection busy share its next write: each gets its own
    /// replies, in its order, errors in place, its commands contiguous (a `MULTI` block of
    /// one caller is never cut by another's).
    @Test func callersOfABusyConnectionShareItsWritesAndEachGetsItsOwnReplies() async throws {
        let key = TestRedis.uniquePrefix("shared")
        let configuration = try await TestRedis.configuration()
        let pool = RedisConnectionPool(configuration: configuration, maximumConnections: 1, name: key, logger: TestRedis.logger)
        defer { pool.close() }
        // A script that keeps the server busy for a while: the callers pile up behind its write.
        let slow = RedisScript(name: "slow", source: "local i = 0 while i < tonumber(ARGV[1]) do i = i + 1 end return i")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                let counted = try await pool.run(slow, keys: [], arguments: ["2000000"]).int
                #expect(counted == 2_000_000)
            }
            for caller in 0..<200 {
                group.addTask {
                    let list = "\(key):list:\(caller)"
                    let replies = try await pool.pipeline([
                        ["RPUSH", list, "a\(caller)"], ["RPUSH", list, "b\(caller)"], ["LRANGE", list, "0", "-1"],
                        ["INCR", list],
                        ["MULTI"], ["INCR", "\(key):count"], ["GET", "\(key):count"], ["EXEC"],
                    ])
                    #expect(replies.count == 8)
                    #expect(replies[0] == .integer(1) && replies[1] == .integer(2))
                    #expect(replies[2].array?.compactMap(\.string) == ["a\(caller)", "b\(caller)"], "\(replies[2])")
                    if case .error(let message) = replies[3] {
                        #expect(message.hasPrefix("WRONGTYPE"))
                    } else {
                        Issue.record("\(replies[3])")
                    }
                    #expect(replies[4] == .status("OK") && replies[5] == .status("QUEUED") && replies[6] == .status("QUEUED"))
                    // Nobody else's INCR ran between this caller's INCR and GET.
                    let exec = replies[7].array ?? []
                    #expect(exec.count == 2 && exec[1].string == exec[0].int.map(String.init), "\(exec)")
                }
            }
            try await group.waitForAll()
        }
        #expect(try await pool.send(["GET", "\(key):count"]).int == 200)
        #expect(pool.sharedWrites > 0)
        var keys = ["\(key):count"]
        for caller in 0..<200 { keys.append("\(key):list:\(caller)") }
        try await pool.send(["DEL"] + keys)
    }

    /// On one server a script's keys must share a slot as on a cluster, so a test here
    /// refuses what a cluster would; keys passed as `otherSlotKeys` may be in other slots.
    /// A server that shards behind a `redis://` URL refuses them itself (`CROSSSLOT`).
    @Test func aScriptsOtherSlotKeysRunOnOneServerAndAShardingServerSaysCrossSlot() async throws {
        let pool = try await TestRedis.pool()
        let prefix = TestRedis.uniquePrefix("slots")
        let (a, b) = ("\(prefix):a", "\(prefix):b")
        #expect(RedisKeySlot.slot(a) != RedisKeySlot.slot(b))
        let script = RedisScript(name: "copy", source: "redis.call('SET', KEYS[2], ARGV[1]); return redis.call('GET', KEYS[1])")
        let refused = await #expect(throws: RedisError.self) { try await pool.run(script, keys: [a, b], arguments: ["x"]) }
        #expect(refused?.code == .crossSlot)
        #expect(try await pool.send(["EXISTS", b]).int == 0, "refused before it was sent")
        try await pool.send(["SET", a, "y"])
        #expect(try await pool.run(script, keys: [a], otherSlotKeys: [b], arguments: ["x"]).string == "y")
        #expect(try await pool.send(["GET", b]).string == "x")
        try await pool.send(["DEL", a])
        try await pool.send(["DEL", b])

        // Announced (`?sharded=yes`), the client refuses them itself, before they are sent.
        var announcedConfiguration = try await TestRedis.configuration()
        announcedConfiguration.sharded = true
        let announced = RedisConnectionPool(configuration: announcedConfiguration, logger: TestRedis.logger)
        let refusedHere = await #expect(throws: RedisError.self) {
            try await announced.run(script, keys: [a], otherSlotKeys: [b], arguments: ["x"])
        }
        #expect(refusedHere?.code == .crossSlot)
        #expect(try await pool.send(["EXISTS", b]).int == 0)
        announced.close()

        let shard = try await LocalRedisCluster.startOneNode()
        do {
            let sharded = RedisConnectionPool(
                configuration: try RedisConfiguration(url: "redis://\(shard.nodes[0].address)"), logger: TestRedis.logger)
            try await sharded.send(["SET", a, "y"])
            let crossed = await #expect(throws: RedisError.self) {
                try await sharded.run(script, keys: [a], otherSlotKeys: [b], arguments: ["x"])
            }
            #expect(crossed?.code == .serverError)
            #expect(crossed?.message.hasPrefix("CROSSSLOT") == true, "\(String(describing: crossed))")
            #expect(try await sharded.send(["EXISTS", b]).int == 0)
            sharded.close()
        } catch {
            Issue.record("\(error)")
        }
        await shard.stop()
    }

    /// A script the calls after it must follow runs first even where the server does not
    /// know it: by EVALSHA it would be sent again after them (NOSCRIPT), and they would read
    /// what it had not written yet.
    @Test func aScriptSentInPlaceRunsBeforeTheCallsAfterItOnAServerThatLacksIt() async throws {
        let pool = try await TestRedis.pool()
        defer { pool.close() }
        let key = TestRedis.uniquePrefix("in-place")
        // Unique source, so no other test has loaded it.
        let script = RedisScript(name: "set-it", source: "return redis.call('SET', KEYS[1], ARGV[1]) -- \(key)")
        let inPlace = try await pool.execute([
            .scriptInPlace(script, keys: [key + ":a"], arguments: ["written"]), .command(["GET", key + ":a"]),
        ])
        #expect(try inPlace[0].get() == .status("OK"))
        #expect(try inPlace[1].get().string == "written", "the read follows the script")

        // The same by EVALSHA on a server that lacks it: the read ran first.
        let other = RedisScript(name: "set-it", source: "return redis.call('SET', KEYS[1], ARGV[1]) -- \(key) again")
        let bySHA = try await pool.execute([
            .script(other, keys: [key + ":b"], arguments: ["written"]), .command(["GET", key + ":b"]),
        ])
        #expect(try bySHA[0].get() == .status("OK"))
        #expect(try bySHA[1].get() == .null)
        _ = try await pool.send(["DEL", key + ":a", key + ":b"])
    }

    @Test func sha1MatchesKnownDigests() {
        #expect(RedisScript(name: "empty", source: "").sha1 == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(
            RedisScript(name: "fox", source: "The quick brown fox jumps over the lazy dog").sha1
                == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12")
    }
}
