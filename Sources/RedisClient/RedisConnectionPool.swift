import Logging
import Synchronization

/// The Redis client every part of Entitle holds: bounded pools of connections, shared by
/// many tasks, to one server, to the primary Sentinel names, or to each primary of a
/// Redis Cluster (`RedisConfiguration.topology`). Every command, pipeline and script goes
/// to the server that holds its keys; callers write the same code for all three.
///
/// On a cluster, a command's keys must share a slot (one hash tag), and a script's keys
/// must share one on every topology: otherwise it is refused with `.crossSlot` before it
/// is sent. A pipeline may span slots: it is split per server and the replies come back
/// in order.
///
/// Blocking commands (BLMOVE and friends) must not use the pool: give each blocking
/// consumer a connection of its own (see `makeDedicatedConnection`).
public final class RedisConnectionPool: Sendable {
    public let configuration: RedisConfiguration
    /// The most connections open to each server at once.
    public let maximumConnections: Int
    /// Connections are named `NAME-1`, `NAME-2`, ... (`CLIENT SETNAME`), to find them in `CLIENT LIST`.
    public let name: String
    let router: RedisRouter

    public init(configuration: RedisConfiguration, maximumConnections: Int = 4, name: String = "pool", logger: Logger) {
        precondition(maximumConnections > 0, "a pool needs at least one connection")
        self.configuration = configuration
        self.maximumConnections = maximumConnections
        self.name = name
        self.router = RedisRouter(configuration: configuration, maximumConnections: maximumConnections, name: name, logger: logger)
    }

    /// A connection outside the pool, for one blocking consumer. It goes wherever its
    /// commands' keys live, and follows them when their slot or the primary moves.
    public func makeDedicatedConnection(name: String) -> RedisDedicatedConnection {
        RedisDedicatedConnection(router: router, name: name)
    }

    /// Runs one command; an error reply is thrown as `RedisError` with code `.serverError`.
    @discardableResult
    public func send(_ command: [String]) async throws -> RedisReply {
        try await router.send(command, timeout: nil, through: self)
    }

    /// Sends every command and returns every reply, in order: one round trip per server
    /// involved. Error replies come back in place; a broken connection throws (some
    /// commands may have run).
    public func pipeline(_ commands: [[String]]) async throws -> [RedisReply] {
        try await router.pipeline(commands, timeout: nil, through: self)
    }

    /// Runs a script by EVALSHA (EVAL when the server does not have it cached).
    @discardableResult
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RedisReply {
        try await router.runPipelined(script, calls: [(keys, arguments)], through: self)[0].get()
    }

    /// Runs a script whose `otherSlotKeys` (after `keys` in its KEYS) need not share the
    /// slot of `keys`: for a write folded into one script where one server holds every key
    /// (`RedisConfiguration.holdsEveryKeyOnOneServer`). `keys` are checked as `run` checks
    /// them; on a cluster or a sharded address the others are too, so keys that span slots
    /// are refused (`.crossSlot`). An endpoint that shards unannounced and checks slots
    /// answers `CROSSSLOT`, thrown as its error reply.
    @discardableResult
    public func run(_ script: RedisScript, keys: [String], otherSlotKeys: [String], arguments: [String]) async throws -> RedisReply {
        let slot = try RedisRouter.slot(of: script, configuration.holdsEveryKeyOnOneServer ? keys : keys + otherSlotKeys)
        let routed = RoutedCommand(command: script.command(keys: keys + otherSlotKeys, arguments: arguments), slot: slot, script: script)
        let reply = try await router.execute([routed], timeout: nil, through: self)[0]
        if case .error(let message) = reply { throw RedisError.script(script, replied: message) }
        return reply
    }

    /// Runs several calls of one script, pipelined per server; each result is its reply or its error.
    public func runPipelined(
        _ script: RedisScript, calls: [(keys: [String], arguments: [String])]
    ) async throws -> [Result<RedisReply, RedisError>] {
        try await router.runPipelined(script, calls: calls, through: self)
    }

    /// The server (`host:port`) that serves `key` now: the one server, the Sentinel
    /// primary, or the cluster primary of the key's slot.
    public func server(forKey key: String) async throws -> String {
        try await router.address(forSlot: router.isCluster ? RedisKeySlot.slot(key) : nil).description
    }

    /// Writes this pool's connections sent with more than one caller's commands (callers
    /// that found every connection to a server busy share its next write).
    package var sharedWrites: Int { router.sharedWrites }

    /// Closes the connections and fails later commands; commands under way finish.
    public func close() { router.close() }
}

extension RedisConnectionPool: RedisConnectionSource {
    func pipeline(_ commands: [[String]], to address: RedisConfiguration.Address, timeout: Duration?) async throws -> [RedisReply] {
        try await router.pool(address).pipeline(commands, timeout: timeout)
    }
}

/// A connection of one's own (blocking commands, ordered writes) that goes to the server
/// holding its commands' keys, and moves when their slot or the primary moves. The
/// connection itself is a `RedisConnection` actor on its own thread.
public final class RedisDedicatedConnection: Sendable {
    public let name: String
    private let router: RedisRouter
    private let current = Mutex<(address: RedisConfiguration.Address, connection: RedisConnection)?>(nil)

    init(router: RedisRouter, name: String) {
        self.router = router
        self.name = name
    }

    /// Runs one command; an error reply is thrown as `RedisError` with code `.serverError`.
    /// - Parameter timeout: longest wait for the reply, for blocking commands; the configured
    ///   command timeout otherwise.
    @discardableResult
    public func send(_ command: [String], timeout: Duration? = nil) async throws -> RedisReply {
        try await router.send(command, timeout: timeout, through: self)
    }

    /// Runs a script by EVALSHA (EVAL when the server does not have it cached).
    @discardableResult
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) async throws -> RedisReply {
        try await router.runPipelined(script, calls: [(keys, arguments)], through: self)[0].get()
    }

    /// Sends `command` and, in the same write, `script`: the server runs the script once
    /// the command has its reply (a blocking command's, when it unblocks), with no round
    /// trip between. The command's error reply is thrown; the script's is its result.
    /// Where replicas must confirm writes, a `WAIT` follows only a script that answered
    /// something other than an empty array (one that wrote nothing needs none).
    /// - Parameter timeout: longest wait for the replies, for a blocking `command`.
    public func send(
        _ command: [String], thenRun script: RedisScript, keys: [String], arguments: [String], timeout: Duration? = nil
    ) async throws -> (command: RedisReply, script: Result<RedisReply, RedisError>) {
        try await router.send(command, thenRun: script, keys: keys, arguments: arguments, timeout: timeout, through: self)
    }
}

extension RedisDedicatedConnection: RedisConnectionSource {
    func pipeline(_ commands: [[String]], to address: RedisConfiguration.Address, timeout: Duration?) async throws -> [RedisReply] {
        let (connection, replaced) = current.withLock { current -> (RedisConnection, RedisConnection?) in
            if let current, current.address == address { return (current.connection, nil) }
            let connection = RedisConnection(configuration: router.nodeConfiguration(address), name: name, logger: router.logger)
            defer { current = (address, connection) }
            return (connection, current?.connection)
        }
        if let replaced { Task { await replaced.disconnect() } }
        return try await connection.pipeline(commands, timeout: timeout)
    }
}

extension RedisRouter {
    func send(_ command: [String], timeout: Duration?, through source: any RedisConnectionSource) async throws -> RedisReply {
        let routed = RoutedCommand(command: command, slot: isCluster ? try RedisCommandKeys.slot(command) : nil)
        let reply = try await execute([routed], timeout: timeout, through: source)[0]
        if case .error(let message) = reply { throw RedisError(.serverError, message) }
        return reply
    }

    func send(
        _ command: [String], thenRun script: RedisScript, keys: [String], arguments: [String], timeout: Duration?,
        through source: any RedisConnectionSource
    ) async throws -> (command: RedisReply, script: Result<RedisReply, RedisError>) {
        let slot = try Self.slot(of: script, keys)
        var run = RoutedCommand(command: script.command(keys: keys, arguments: arguments), slot: slot, script: script)
        run.confirmed = false
        let routed = [RoutedCommand(command: command, slot: isCluster ? try RedisCommandKeys.slot(command) : nil), run]
        let replies = try await execute(routed, timeout: timeout, through: source)
        if case .error(let message) = replies[0] { throw RedisError(.serverError, message) }
        if case .error(let message) = replies[1] { return (replies[0], .failure(RedisError.script(script, replied: message))) }
        if replies[1].array?.isEmpty != true, let wait = waitCommand(for: [RoutedCommand(command: run.command)]) {
            checkWait(try await execute([RoutedCommand(command: wait, slot: slot)], timeout: nil, through: source).first)
        }
        return (replies[0], .success(replies[1]))
    }

    func pipeline(_ commands: [[String]], timeout: Duration?, through source: any RedisConnectionSource) async throws -> [RedisReply] {
        let routed = try commands.map { RoutedCommand(command: $0, slot: isCluster ? try RedisCommandKeys.slot($0) : nil) }
        return try await execute(routed, timeout: timeout, through: source)
    }

    func runPipelined(
        _ script: RedisScript, calls: [(keys: [String], arguments: [String])], through source: any RedisConnectionSource
    ) async throws -> [Result<RedisReply, RedisError>] {
        let routed = try calls.map { call in
            RoutedCommand(
                command: script.command(keys: call.keys, arguments: call.arguments), slot: try Self.slot(of: script, call.keys),
                script: script)
        }
        return try await execute(routed, timeout: nil, through: source).map { reply in
            if case .error(let message) = reply { return .failure(RedisError.script(script, replied: message)) }
            return .success(reply)
        }
    }

    /// The one slot of a script's keys, checked on every topology, so that a test on one
    /// server refuses what a cluster (or a strict proxy) would.
    static func slot(of script: RedisScript, _ keys: [String]) throws -> Int? {
        guard let first = keys.first else { return nil }
        let slot = RedisKeySlot.slot(first)
        for key in keys.dropFirst() where RedisKeySlot.slot(key) != slot {
            throw RedisError(.crossSlot, "script \(script.name) names keys in different cluster slots; its keys must share one hash tag")
        }
        return slot
    }
}
