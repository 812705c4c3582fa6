import Logging
import Synchronization

/// A bounded set of connections to one server, shared by many tasks. `RedisConnectionPool`
/// keeps one per server it talks to (one, or each primary of a cluster).
///
/// A call goes to an idle connection, or opens one while there are fewer than
/// `maximumConnections`. With every connection busy it does not wait for one to be free:
/// it joins the next write of the connection with the fewest callers
/// (`RedisConnection.pipelineShared`), so callers that pile up share one write and one read
/// instead of a round trip each, and each connection's thread wakes once for them all.
final class RedisNodePool: Sendable {
    private struct State {
        var connections: [RedisConnection] = []
        /// Callers on each connection now, by its index in `connections`.
        var callers: [Int] = []
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

    /// Sends `commands` and reads their replies on one of the pool's connections. With a
    /// `timeout` (a blocking command's), or ending in a `WAIT` for replicas (which may block
    /// for its timeout), the call has its connection's turn to itself: in a shared write
    /// each would hold up the callers after it.
    func pipeline(_ commands: [[String]], timeout: Duration?) async throws -> [RedisReply] {
        let (index, connection) = try take()
        defer { state.withLock { $0.callers[index] -= 1 } }
        if timeout != nil || commands.last?.first == "WAIT" { return try await connection.pipeline(commands, timeout: timeout) }
        return try await connection.pipelineShared(commands)
    }

    /// Writes the pool's connections sent with more than one caller's commands.
    var sharedWrites: Int { state.withLock { $0.connections.reduce(0) { $0 + $1.sharedWrites } } }

    /// Fails later calls and disconnects the connections; a call under way finishes (and a
    /// shared write handed on after the disconnection opens a socket that closes when the
    /// pool is gone).
    func close() {
        let connections = state.withLock { state in
            state.closed = true
            return state.connections
        }
        for connection in connections { Task { await connection.disconnect() } }
    }

    /// An idle connection, a new one, or the one with the fewest callers; counted as taken.
    private func take() throws -> (Int, RedisConnection) {
        let taken: (Int, RedisConnection)? = state.withLock { state in
            if state.closed { return nil }
            var best = -1
            for index in state.callers.indices where best < 0 || state.callers[index] < state.callers[best] {
                best = index
                if state.callers[index] == 0 { break }
            }
            if best < 0 || (state.callers[best] > 0 && state.connections.count < maximumConnections) {
                let number = state.connections.count + 1
                state.connections.append(RedisConnection(configuration: configuration, name: "\(name)-\(number)", logger: logger))
                state.callers.append(0)
                best = state.connections.count - 1
            }
            state.callers[best] += 1
            return (best, state.connections[best])
        }
        guard let taken else { throw RedisError(.poolClosed, "the Redis pool was closed") }
        return taken
    }
}
