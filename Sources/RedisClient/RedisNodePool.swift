import Logging
import Synchronization

/// A bounded set of connections to one server, shared by many tasks. `RedisConnectionPool`
/// keeps one per server it talks to (one, or each primary of a cluster).
final class RedisNodePool: Sendable {
    private struct State {
        var idle: [RedisConnection] = []
        var opened = 0
        var waiters: [CheckedContinuation<RedisConnection, any Error>] = []
        var closed = false
    }

    let configuration: RedisConfiguration
    let maximumConnections: Int
    let name: String
    private let logger: Logger
    private let state = Mutex(State())

    init(configuration: RedisConfiguration, maximumConnections: Int, name: String, logger: Logger) {
        self.configuration = configuration
        self.maximumConnections = maximumConnections
        self.name = name
        self.logger = logger
    }

    /// Lends a connection to `body` and takes it back afterwards.
    func withConnection<T: Sendable>(_ body: (RedisConnection) async throws -> T) async throws -> T {
        let connection = try await lease()
        defer { release(connection) }
        return try await body(connection)
    }

    /// Closes idle connections and fails waiting and later leases; leased ones close when returned.
    func close() {
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
        let (waiter, closed): (CheckedContinuation<RedisConnection, any Error>?, Bool) = state.withLock { state in
            if !state.waiters.isEmpty { return (state.waiters.removeFirst(), false) }
            if state.closed { return (nil, true) }
            state.idle.append(connection)
            return (nil, false)
        }
        waiter?.resume(returning: connection)
        if closed { Task { await connection.disconnect() } }
    }
}
