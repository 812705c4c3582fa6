import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport

/// Runs the built `entitle` against the test Redis under a prefix of its own.
struct CLI {
    let url: String
    let prefix: String
    let redis: RedisConnectionPool

    /// - Parameter url: another Redis than the tests' (a cluster).
    init(_ test: String, url: String? = nil) async throws {
        if let url { self.url = url } else { self.url = try await TestRedis.url() }
        prefix = TestRedis.uniquePrefix(test)
        var configuration = try RedisConfiguration(url: self.url)
        configuration.reconnectTimeout = .seconds(30)
        redis = RedisConnectionPool(configuration: configuration, maximumConnections: 2, name: "cli-test", logger: TestRedis.logger)
    }

    var common: [String] { ["--redis", url, "--prefix", prefix] }

    func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
        try await ChildProcess.run(ChildProcess.entitleExecutable, arguments + common)
    }

    func start(_ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(ChildProcess.entitleExecutable, arguments + common)
    }

    func json(_ arguments: [String]) async throws -> [String: Any] {
        let result = try await run(arguments)
        guard result.status == 0, let object = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] else {
            throw SpawnError(message: "entitle \(arguments) failed (\(result.status)): \(result.output) \(result.errors)")
        }
        return object
    }

    func key(_ queue: String, _ rest: String) -> String { "\(prefix):{\(queue)}:\(rest)" }

    func queueStats(_ queue: String = "default") async throws -> [String: Any] {
        let queues = try await json(["queues", "--json"])["queues"] as? [[String: Any]] ?? []
        return queues.first { $0["name"] as? String == queue } ?? [:]
    }
}

/// Runs `body` again (at most 5 times) when a connection open at a crash broke under it.
func retryingLost<T>(_ body: () async throws -> T) async throws -> T {
    var attempt = 0
    while true {
        attempt += 1
        do {
            return try await body()
        } catch let error as RedisError where error.isRetryable && attempt < 5 {
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}
