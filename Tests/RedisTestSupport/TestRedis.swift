import Foundation
import LocalProcesses
import Logging
import RedisClient

/// The Redis the tests use: `ENTITLE_TEST_REDIS_URL` when the test command started one,
/// else one private redis-server per test process, started on first use.
public enum TestRedis {
    private static let shared = SharedServer()

    public static func url() async throws -> String {
        if let url = ProcessInfo.processInfo.environment["ENTITLE_TEST_REDIS_URL"], !url.isEmpty { return url }
        return try await shared.url()
    }

    public static func configuration() async throws -> RedisConfiguration {
        try RedisConfiguration(url: try await url())
    }

    /// A key prefix no other test uses, so tests can run in parallel on one server.
    public static func uniquePrefix(_ name: String = "t") -> String {
        "test-\(name)-\(UUID().uuidString.prefix(8).lowercased())"
    }

    public static let logger: Logger = {
        var logger = Logger(label: "entitle.tests")
        logger.logLevel = ProcessInfo.processInfo.environment["ENTITLE_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }()

    public static func pool(connections: Int = 4) async throws -> RedisConnectionPool {
        RedisConnectionPool(configuration: try await configuration(), maximumConnections: connections, logger: logger)
    }

    /// Starts the server once, however many tests ask at the same time: callers share one
    /// start task (an actor alone would start one per caller that arrives during the await).
    private actor SharedServer {
        private var starting: Task<String, any Error>?

        func url() async throws -> String {
            if let starting { return try await starting.value }
            let task = Task {
                let server = try await LocalRedisServer(logger: TestRedis.logger)
                sharedServerPID = server.processIdentifier
                atexit { if sharedServerPID > 0 { kill(sharedServerPID, SIGKILL) } }
                return server.url
            }
            starting = task
            return try await task.value
        }
    }
}

/// The shared server's pid, for the exit handler (a C function pointer cannot capture).
nonisolated(unsafe) private var sharedServerPID: pid_t = 0

/// Waits for a condition that an event in another process or task will make true,
/// checking every 10 ms; fails after `timeout`. The timeout only catches an event that never
/// comes: CI runs the whole suite on two shared cores, so it is generous.
public func eventually(
    _ what: String, timeout: Duration = .seconds(60), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while true {
        if try await condition() { return }
        if ContinuousClock.now >= deadline { throw TimedOut(what: what) }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Waits for a count to reach `target`, failing only when it stops moving for `stall`: a slow
/// machine is not a fault, a count that no longer grows (jobs lost or stuck) is.
public func eventually(
    _ what: String, reaches target: Int, stall: Duration = .seconds(60), _ measure: () async throws -> Int
) async throws {
    var last = Int.min
    var movedAt = ContinuousClock.now
    while true {
        let value = try await measure()
        if value >= target { return }
        if value != last {
            last = value
            movedAt = ContinuousClock.now
        } else if ContinuousClock.now - movedAt >= stall {
            throw TimedOut(what: "\(what) (stuck at \(value) of \(target) for \(stall))")
        }
        try await Task.sleep(for: .milliseconds(50))
    }
}

public struct TimedOut: Error, CustomStringConvertible {
    public let what: String
    public init(what: String) { self.what = what }
    public var description: String { "timed out waiting for \(what)" }
}
