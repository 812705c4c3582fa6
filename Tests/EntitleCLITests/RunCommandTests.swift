import Foundation
import RedisClient
import RedisTestSupport
import Testing

/// `entitle run`, the README's main command, with its own private redis-server.
@Suite struct RunCommandTests {
    @Test func theDemoRunsJobsThroughAPrivateRedisAndStopsCleanly() async throws {
        let environment = ["ENTITLE_REDIS_URL": ""]
        let once = try await ChildProcess.run(ChildProcess.entitleExecutable, ["run", "--once", "--jobs", "300"], environment: environment)
        #expect(once.status == 0, "\(once.errors)")
        #expect(once.output.contains("started a private redis-server at redis://127.0.0.1:"))
        #expect(once.output.contains("all 300 jobs succeeded"))
        #expect(once.output.contains("succeeded after"))

        // Serving: SIGTERM stops the worker and the private redis-server with it.
        let serving = try ChildProcess(ChildProcess.entitleExecutable, ["run", "--jobs", "50"], environment: environment)
        defer { if serving.isRunning { serving.signal(SIGKILL) } }  // when an expectation below fails
        try await eventually("the demo to finish and serve") { serving.output.contains("serving until Ctrl-C") }
        let url = try #require(serving.output.split(separator: " ").first { $0.hasPrefix("redis://127.0.0.1:") }.map(String.init))
        var configuration = try RedisConfiguration(url: url)
        configuration.reconnectTimeout = .zero
        let probe = RedisConnection(configuration: configuration, name: "probe", logger: TestRedis.logger)
        #expect(try await probe.send(["PING"]) == .status("PONG"))
        serving.signal(SIGTERM)
        #expect(try await serving.wait(timeout: .seconds(30)) == 0)
        await probe.disconnect()
        await #expect(throws: RedisError.self) { try await probe.send(["PING"]) }
    }
}
