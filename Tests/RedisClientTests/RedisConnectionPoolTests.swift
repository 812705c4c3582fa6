import RedisClient
import RedisTestSupport
import Testing

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

    @Test func sha1MatchesKnownDigests() {
        #expect(RedisScript(name: "empty", source: "").sha1 == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(
            RedisScript(name: "fox", source: "The quick brown fox jumps over the lazy dog").sha1
                == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12")
    }
}
