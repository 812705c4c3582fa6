import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

@Suite struct RedisConnectionTests {
    func connection(_ name: String = "test") async throws -> RedisConnection {
        RedisConnection(configuration: try await TestRedis.configuration(), name: name, logger: TestRedis.logger)
    }

    @Test func typedReplies() async throws {
        let redis = try await connection()
        let key = TestRedis.uniquePrefix("typed")
        #expect(try await redis.send(["SET", key, "hello"]) == .status("OK"))
        #expect(try await redis.send(["GET", key]).string == "hello")
        #expect(try await redis.send(["INCR", key + ":n"]) == .integer(1))
        #expect(try await redis.send(["GET", key + ":missing"]).isNull)
        try await redis.send(["RPUSH", key + ":list", "a", "b", "c"])
        #expect(try await redis.send(["LRANGE", key + ":list", "0", "-1"]).array?.compactMap(\.string) == ["a", "b", "c"])
        try await redis.send(["DEL", key, key + ":n", key + ":list"])
    }

    @Test func argumentsAreBinarySafe() async throws {
        let redis = try await connection()
        let key = TestRedis.uniquePrefix("binary")
        let value = "a\u{0}b \"quoted\" %s %d\r\n ünïcødé 🎟"
        try await redis.send(["SET", key, value])
        #expect(try await redis.send(["GET", key]).string == value)
        #expect(try await redis.send(["STRLEN", key]).int == value.utf8.count)
        try await redis.send(["SET", key, ""])
        #expect(try await redis.send(["GET", key]) == .bulk([]))
        // Lengths and counts across digit boundaries (the command is formatted here, as RESP).
        for length in [9, 10, 99, 100, 1_000, 100_000] {
            let long = String(repeating: "x", count: length - 1) + "é"
            try await redis.send(["SET", key, long])
            #expect(try await redis.send(["STRLEN", key]).int == length + 1)
        }
        let values = (0..<123).map { "v\($0)" }
        try await redis.send(["DEL", key])
        #expect(try await redis.send(["RPUSH", key] + values).int == 123)
        #expect(try await redis.send(["LRANGE", key, "0", "-1"]).array?.compactMap(\.string) == values)
        try await redis.send(["DEL", key])
    }

    /// A write to a socket the server closed fails the call and the next one reconnects: the
    /// peer's reset is an error, never a SIGPIPE that would end the process. The probe below
    /// runs in a process of its own (this test binary again), with SIGPIPE's default action:
    /// NIO, which other tests here use, ignores SIGPIPE for its whole process, which would
    /// hide one. (Swift Testing's exit tests left a thread spinning once their child exited
    /// in a process that runs other children.)
    @Test(.timeLimit(.minutes(3))) func aWriteToASocketTheServerClosedFailsWithoutEndingTheProcess() async throws {
        let probe = try await ChildProcess.run(
            CommandLine.arguments[0], ["--testing-library", "swift-testing", "--filter", "writeToSocketsTheServerClosedProbe"],
            environment: [Self.probeVariable: "1"], timeout: .seconds(150))
        #expect(
            probe.status == 0,
            "the probe ended with \(probe.status) (141: SIGPIPE): \(probe.output.suffix(1500)) \(probe.errors.suffix(500))")
        #expect(probe.output.contains(Self.probeDone), "the probe ran: \(probe.output.suffix(1500))")
    }

    static let probeVariable = "ENTITLE_SIGPIPE_PROBE"
    static let probeDone = "probe: three writes to closed sockets failed, the process lives"

    @Test(.enabled(if: ProcessInfo.processInfo.environment[probeVariable] == "1"))
    func writeToSocketsTheServerClosedProbe() async throws {
        signal(SIGPIPE, SIG_DFL)
        let redis = try await connection("closed")
        let admin = try await connection("admin")
        let key = TestRedis.uniquePrefix("closed")
        // Large enough that the write goes on after the server's reset arrives.
        let value = String(repeating: "x", count: 8 << 20)
        for _ in 0..<3 {
            let id = try #require(try await redis.send(["CLIENT", "ID"]).int)
            #expect(try await admin.send(["CLIENT", "KILL", "ID", String(id)]).int == 1)
            let error = await #expect(throws: RedisError.self) { try await redis.send(["SET", key, value]) }
            #expect(error?.code == .connectionLost, "\(String(describing: error))")
            #expect(try await redis.send(["PING"]) == .status("PONG"), "the next call reconnects")
        }
        #expect(try await admin.send(["EXISTS", key]).int == 0)
        print(Self.probeDone)
    }

    @Test func errorRepliesAreThrownWithTheServerText() async throws {
        let redis = try await connection()
        let key = TestRedis.uniquePrefix("wrongtype")
        try await redis.send(["SET", key, "x"])
        let error = try await #require(throws: RedisError.self) { try await redis.send(["LPUSH", key, "y"]) }
        #expect(error.code == .serverError)
        #expect(error.message.hasPrefix("WRONGTYPE"))
        #expect(!error.isRetryable)
        // The connection stays usable after an error reply.
        #expect(try await redis.send(["GET", key]).string == "x")
        try await redis.send(["DEL", key])
    }

    @Test func pipelineReturnsEveryReplyInOrderWithErrorsInPlace() async throws {
        let redis = try await connection()
        let key = TestRedis.uniquePrefix("pipe")
        var commands = (0..<100).map { ["RPUSH", key, String($0)] }
        commands.append(["HGET", key, "field"])  // wrong type: an error in place
        commands.append(["LLEN", key])
        let replies = try await redis.pipeline(commands)
        #expect(replies.count == 102)
        #expect(replies[99] == .integer(100))
        if case .error(let message) = replies[100] {
            #expect(message.hasPrefix("WRONGTYPE"))
        } else {
            Issue.record("expected an error reply")
        }
        #expect(replies[101] == .integer(100))
        try await redis.send(["DEL", key])
    }

    @Test func scriptsRunByShaAndReloadAfterFlush() async throws {
        let redis = try await connection()
        let key = TestRedis.uniquePrefix("script")
        let script = RedisScript(
            name: "incrTwice", source: "redis.call('INCR', KEYS[1]); return redis.call('INCRBY', KEYS[1], ARGV[1]) -- \(key)")
        // Redis names scripts by SHA1 of their text: ours must agree.
        let serverSHA = try await redis.send(["SCRIPT", "LOAD", script.source]).string
        #expect(serverSHA == script.sha1)
        try await redis.send(["SCRIPT", "FLUSH"])
        #expect(try await redis.run(script, keys: [key], arguments: ["10"]) == .integer(11))
        #expect(try await redis.send(["SCRIPT", "EXISTS", script.sha1]).array == [.integer(1)])
        #expect(try await redis.run(script, keys: [key], arguments: ["10"]) == .integer(22))
        try await redis.send(["DEL", key])
    }

    @Test func timeoutDropsTheConnectionAndTheNextCallReconnects() async throws {
        let redis = try await connection("timeout")
        let key = TestRedis.uniquePrefix("timeout")
        let error = try await #require(throws: RedisError.self) {
            try await redis.send(["BLPOP", key, "5"], timeout: .milliseconds(200))
        }
        #expect(error.code == .timeout)
        #expect(error.isRetryable)
        #expect(try await redis.send(["PING"]) == .status("PONG"))
    }

    @Test func reconnectsAfterClientKill() async throws {
        let redis = try await connection("killed")
        let killer = try await connection("killer")
        let firstID = try #require(try await redis.send(["CLIENT", "ID"]).int)
        try await killer.send(["CLIENT", "KILL", "ID", String(firstID)])
        // The first command after the kill finds the socket closed; it fails as retryable…
        do {
            _ = try await redis.send(["PING"])
        } catch let error as RedisError {
            #expect(error.code == .connectionLost)
            #expect(error.isRetryable)
        }
        // …and the next one runs on a new connection.
        let secondID = try #require(try await redis.send(["CLIENT", "ID"]).int)
        #expect(secondID != firstID)
    }

    @Test func authenticatesAndSelectsTheDatabaseFromTheURL() async throws {
        let admin = try await connection()
        let base = try await TestRedis.configuration()
        let user = TestRedis.uniquePrefix("user")
        try await admin.send(["ACL", "SETUSER", user, "on", ">s3cret-pass", "~*", "+@all"])
        defer { Task { try? await admin.send(["ACL", "DELUSER", user]) } }

        let configuration = try RedisConfiguration(url: "redis://\(user):s3cret-pass@\(base.host):\(base.port)/3")
        let redis = RedisConnection(configuration: configuration, logger: TestRedis.logger)
        let info = try await redis.send(["CLIENT", "INFO"]).string ?? ""
        #expect(info.contains("db=3"))
        #expect(info.contains("user=\(user)"))

        var wrong = configuration
        wrong.password = "not-the-password"
        wrong.reconnectTimeout = .zero
        let error = try await #require(throws: RedisError.self) {
            try await RedisConnection(configuration: wrong, logger: TestRedis.logger).send(["PING"])
        }
        #expect(error.code == .connectionFailed)
        #expect(!error.message.contains("not-the-password"))
    }

    @Test func urlParsing() throws {
        let full = try RedisConfiguration(url: "redis://alice:p%40ss@example.org:6380/2")
        #expect(full.host == "example.org")
        #expect(full.port == 6380)
        #expect(full.username == "alice")
        #expect(full.password == "p@ss")
        #expect(full.database == 2)
        #expect(!full.displayAddress.contains("p@ss"))
        let passwordOnly = try RedisConfiguration(url: "redis://:secret@localhost")
        #expect(passwordOnly.username == nil)
        #expect(passwordOnly.password == "secret")
        #expect(passwordOnly.port == 6379)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "http://localhost:6379") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://localhost/notanumber") }
    }

    @Test func blockingCallsDoNotStarveTheCooperativePool() async throws {
        // Four connections block in BLPOP at once: more than the cooperative pool has
        // threads on this machine. If blocking ran on the pool, the LPUSHes below could not
        // run until the BLPOPs timed out, and they would return nil.
        let prefix = TestRedis.uniquePrefix("blocking")
        let waiters = try await (0..<4).asyncMap { try await connection("blocker-\($0)") }
        let pusher = try await connection("pusher")
        try await withThrowingTaskGroup(of: String?.self) { group in
            for (index, waiter) in waiters.enumerated() {
                group.addTask { try await waiter.send(["BLPOP", "\(prefix):\(index)", "10"], timeout: .seconds(12)).array?.last?.string }
            }
            for index in 0..<4 {
                try await eventually("BLPOP \(index) to block") {
                    let clients = try await pusher.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
                    return clients.components(separatedBy: "\n").filter { $0.contains("name=blocker-") && $0.contains("cmd=blpop") }.count
                        >= 4
                }
                try await pusher.send(["LPUSH", "\(prefix):\(index)", "value-\(index)"])
            }
            var values: [String?] = []
            for try await value in group { values.append(value) }
            #expect(Set(values.compactMap { $0 }) == ["value-0", "value-1", "value-2", "value-3"])
        }
    }
}

extension Sequence where Element: Sendable {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}

@Suite struct RedisReconnectTests {
    @Test func aCommandWaitsWithBackoffUntilTheServerIsBack() async throws {
        let port = try LocalRedisServer.freePort()
        let first = try ChildProcess("/usr/bin/redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", ""])
        var configuration = RedisConfiguration(port: port, connectTimeout: .milliseconds(200), reconnectTimeout: .seconds(10))
        let probe = RedisConnection(configuration: configuration, name: "probe", logger: TestRedis.logger)
        try await eventually("the first server to answer") { (try? await probe.send(["PING"])) == .status("PONG") }
        let redis = RedisConnection(configuration: configuration, name: "survivor", logger: TestRedis.logger)
        try await redis.send(["SET", "k", "1"])
        first.signal(SIGKILL)
        _ = try await first.wait()
        // The next command meets the dead socket: connectionLost, and the context is dropped.
        let lost = try await #require(throws: RedisError.self) { try await redis.send(["PING"]) }
        #expect(lost.code == .connectionLost)

        // Down: with no time to reconnect, the command fails at once as connectionFailed…
        configuration.reconnectTimeout = .zero
        let impatient = RedisConnection(configuration: configuration, name: "impatient", logger: TestRedis.logger)
        let error = try await #require(throws: RedisError.self) { try await impatient.send(["PING"]) }
        #expect(error.code == .connectionFailed && error.isRetryable)

        // …while a patient one keeps retrying (with backoff) until a new server is up.
        async let answer = redis.send(["INCR", "k"])
        try await Task.sleep(for: .milliseconds(300))  // the outage the client must ride out
        let second = try ChildProcess("/usr/bin/redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", ""])
        defer {
            second.signal(SIGKILL)
        }
        // It was issued while nothing listened, and answers from the new (empty) server.
        #expect(try await answer == .integer(1))
        #expect(try await redis.send(["INCR", "k"]) == .integer(2))
    }
}

@Suite struct RedisBusyServerTests {
    /// While a script runs past the busy threshold the server refuses everything else with
    /// `BUSY`; a script refused so must read as retryable (the queue sends it again), through
    /// the pool and through a connection of its own alike.
    @Test(.timeLimit(.minutes(1))) func aScriptRefusedByABusyServerIsRetryable() async throws {
        let server = try await LocalRedisServer(logger: TestRedis.logger)
        do {
            let configuration = try RedisConfiguration(url: server.url)
            let pool = RedisConnectionPool(configuration: configuration, logger: TestRedis.logger)
            let own = RedisConnection(configuration: configuration, name: "own", logger: TestRedis.logger)
            try await pool.send(["CONFIG", "SET", "busy-reply-threshold", "100"])
            let script = RedisScript(name: "bump", source: "return redis.call('INCR', KEYS[1])")
            #expect(try await pool.run(script, keys: ["n"], arguments: []).int == 1)
            try await own.run(script, keys: ["n"], arguments: [])

            // Another client keeps the server inside a script for 5 s.
            var patient = configuration
            patient.commandTimeout = .seconds(30)
            let busy = RedisConnection(configuration: patient, name: "busy", logger: TestRedis.logger)
            let spin = """
                local start = redis.call('TIME')
                while true do
                  local now = redis.call('TIME')
                  if (now[1] - start[1]) * 1000000 + (now[2] - start[2]) > 5000000 then return 1 end
                end
                """
            async let spun = busy.send(["EVAL", spin, "0"])
            try await eventually("the server to be busy") {
                do {
                    try await own.send(["PING"])
                    return false
                } catch let error as RedisError {
                    return error.message.hasPrefix("BUSY")
                }
            }
            for runner in ["pool", "own"] {
                let error = try await #require(throws: RedisError.self, "\(runner)") {
                    if runner == "pool" {
                        try await pool.run(script, keys: ["n"], arguments: [])
                    } else {
                        try await own.run(script, keys: ["n"], arguments: [])
                    }
                }
                #expect(error.code == .serverError && error.message.hasPrefix("BUSY"), "\(runner): \(error)")
                #expect(error.isRetryable, "\(runner): \(error)")
                #expect(error.message.hasSuffix("(script bump)"))
            }
            #expect(try await spun.int == 1)
            // Once the server is free the same call runs.
            #expect(try await pool.run(script, keys: ["n"], arguments: []).int == 3)
            pool.close()
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
