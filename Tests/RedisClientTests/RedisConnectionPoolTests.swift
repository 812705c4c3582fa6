import RedisClient
import RedisTestSupport
import Testing

@Suite struct RedisConnectionPoolTests {
    @Test func manyTasksShareABoundedNumberOfConnections() async throws {
        let pool = try await TestRedis.pool(connections: 2)
        let key = TestRedis.uniquePrefix("pool")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 { group.addTask { try await pool.send(["INCR", key]) } }
            try await group.waitForAll()
        }
        #expect(try await pool.send(["GET", key]).int == 50)
        let clients = try await pool.send(["CLIENT", "LIST"]).string ?? ""
        let ours = try await pool.withConnection { connection in try await connection.send(["CLIENT", "ID"]).int }
        #expect(ours != nil)
        #expect(clients.contains("name=pool-1"))
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
