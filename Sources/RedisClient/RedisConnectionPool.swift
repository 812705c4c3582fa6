import Logging
import Synchronization

/// A bounded set of connections for short commands, shared by many tasks.
///
/// Blocking commands (BLMOVE and friends) must not use the pool: give each blocking
/// consumer its own `RedisConnection` (see `makeDedicatedConnection`).
public final class RedisConnectionPool: Sendable {
    private struct State {
        var idle: [RedisConnection] = []
        var opened = 0
        var waiters: [CheckedContinuation<RedisConnection, any Error>] = []
        var closed = false
    }

    public let configuration: RedisConfiguration
    public let maximumConnections: Int
    /// Connections are named `NAME-1`, `NAME-2`, ... (`CLIENT SETNAME`), to find them in `CLIENT LIST`.
    public let name: String
    private let logger: Logger
    private let state = Mutex(State())

    public init(configuration: RedisConfiguration, maximumConnections: Int = 4, name: String = "pool", logger: Logger) {
        precondition(maximumConnections > 0, "a pool needs at least one connection")
        self.configuration = configuration
        self.maximumConnections = maximumConnections
        self.name = name
        self.logger = logger
    }

    /// A connection outside the pool, for one blocking consumer.
    public func makeDedicatedConnection(name: String) -> RedisConnection {
        RedisConnection(configuration: configuration, name: name, logger: logger)
    }

    /// Lends a connection to `body` and takes it back afterwards.
    public func withConnection<T: Sendable>(_ body: (RedisConnection) async throws -> T) async throws -> T {
        let connection = try await lease()
        defer { release(connection) }
        return try await body(connection)
    }

    @discardableResult
    public func send(_ command: [String]) async throws -> RedisReply {
        try await withConnection { try await $0.send(command) }
    }

    public func pipeline(_ commands: [[String]]) async throws -> [RedisReply] {
        try await withConnection { try await $0.pipeline(commands) }
    }

    @discardableResult
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RedisReply {
        try await withConnection { try await $0.run(script, keys: keys, arguments: arguments) }
    }

    /// Closes idle connections and fails waiting and later leases.
    public func close() {
        let (idle, waiters) = state.withLock { state -> ([RedisConnection], [CheckedContinuation<RedisConnection, any Error>]) in
            state.closed = true
            defer { state.idle = []; state.waiters = [] }
            return (state.idle, state.waiters)
        }
        for waiter in waiters { waiter.resume(throwing: RedisError(.poolClosed, "the Redis pool was closed")) }
        for connection in idle { Task { await connection.disconnect() } }
    }

    private func lease() async throws -> RedisConnection {
        enum Decision { case use(RedisConnection), open(Int), wait, closed }
        let decision: Decision = state.withLock { state in
            if state.closed { return .closed }
            if let connection = state.idle.popLast() { return .use(connection) }
            if state.opened < maximumConnections {
                state.opened += 1
                return .open(state.opened)
            }
            return .wait
        }
        switch decision {
        case .use(let connection): return connection
        case .open(let number):
            return RedisConnection(configuration: configuration, name: "\(name)-\(number)", logger: logger)
        case .closed: throw RedisError(.poolClosed, "the Redis pool was closed")
        case .wait:
            return try await withCheckedThrowingContinuation { continuation in
                let closed = state.withLock { state in
                    if state.closed { return true }
                    if let connection = state.idle.popLast() {
                        continuation.resume(returning: connection)
                    } else {
                        state.waiters.append(continuation)
                    }
                    return false
                }
                if closed { continuation.resume(throwing: RedisError(.poolClosed, "the Redis pool was closed")) }
            }
        }
    }

    private func release(_ connection: RedisConnection) {
        let waiter: CheckedContinuation<RedisConnection, any Error>? = state.withLock { state in
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            if !state.closed { state.idle.append(connection) }
            return nil
        }
        waiter?.resume(returning: connection)
    }
}
