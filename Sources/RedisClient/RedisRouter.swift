import DurationUnits
import Foundation
import Logging
import Synchronization

/// Where a round trip goes: a pooled connection to that server, or a connection of one's own.
protocol RedisConnectionSource: Sendable {
    func pipeline(_ commands: [[String]], to address: RedisConfiguration.Address, timeout: Duration?) async throws -> [RedisReply]
}

/// One command as the router sends it: its slot (cluster), and for scripts the EVAL form
/// to send when the server answers NOSCRIPT.
struct RoutedCommand: Sendable {
    var command: [String]
    var slot: Int?
    var script: RedisScript?
    /// Whether a `WAIT` follows it when replicas must confirm writes; a caller that knows
    /// better (a script that may have written nothing) confirms by itself.
    var confirmed = true

    /// The EVAL form of an EVALSHA command, for a server that answered NOSCRIPT.
    var bySource: [String]? { script.map { ["EVAL", $0.source] + command.dropFirst(2) } }
}

/// Knows which server serves each key of a deployment, keeps a pool of connections per
/// server, and runs commands there: on a cluster it follows MOVED (and refreshes its map
/// of slots) and ASK (ASKING, then the one command); on a cluster or Sentinel it finds the
/// serving node again after connection failures, READONLY and CLUSTERDOWN, retrying what
/// was certainly not run for up to `reconnectTimeout`. One router serves a
/// `RedisConnectionPool` and every dedicated connection made from it.
final class RedisRouter: Sendable {
    typealias Address = RedisConfiguration.Address

    private struct State {
        /// Standalone and Sentinel: the one primary; cluster: every primary, which `slots` index.
        var primaries: [Address] = []
        /// Every node seen in the last cluster map, primaries and replicas, to ask next time.
        var known: [Address] = []
        /// Cluster: slot -> index in `primaries`, -1 when no node serves it.
        var slots: [Int16] = []
        var pools: [Address: RedisNodePool] = [:]
        var refreshing: Task<Void, Never>?
        var lastRefresh: ContinuousClock.Instant?
        var closed = false
        var watcher: Task<Void, Never>?
    }

    let configuration: RedisConfiguration
    let maximumConnections: Int
    let name: String
    let logger: Logger
    private let state: Mutex<State>
    /// Per-server settings: on a cluster or Sentinel one connection attempt, since the
    /// router, not the connection, waits for the deployment to settle.
    private let nodeTemplate: RedisConfiguration

    init(configuration: RedisConfiguration, maximumConnections: Int, name: String, logger: Logger) {
        self.configuration = configuration
        self.maximumConnections = maximumConnections
        self.name = name
        self.logger = logger
        var template = configuration
        var initial = State()
        switch configuration.topology {
        case .standalone:
            initial.primaries = [configuration.address]
        case .cluster(let seeds):
            template.reconnectTimeout = .zero
            initial.known = seeds
        case .sentinel:
            template.reconnectTimeout = .zero
        }
        nodeTemplate = template
        state = Mutex(initial)
    }

    var isStandalone: Bool { if case .standalone = configuration.topology { true } else { false } }
    var isCluster: Bool { if case .cluster = configuration.topology { true } else { false } }
    /// Whether `close()` was called: subscriptions end then.
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Settings for a connection to one server.
    func nodeConfiguration(_ address: Address) -> RedisConfiguration { nodeTemplate.node(address) }

    // MARK: Where keys live

    /// The server for `slot` (any primary when `nil`); reads the topology first if unknown.
    func address(forSlot slot: Int?) async throws -> Address {
        if let address = lookup(slot) { return address }
        await refresh()
        if let address = lookup(slot) { return address }
        throw RedisError(.connectionFailed, noRouteMessage(slot))
    }

    private func lookup(_ slot: Int?) -> Address? {
        state.withLock { state in
            if state.primaries.isEmpty { return nil }
            guard isCluster else { return state.primaries[0] }
            guard let slot else { return state.primaries[0] }
            guard slot < state.slots.count else { return nil }
            let index = Int(state.slots[slot])
            return index >= 0 && index < state.primaries.count ? state.primaries[index] : nil
        }
    }

    private func noRouteMessage(_ slot: Int?) -> String {
        switch configuration.topology {
        case .standalone: return "no Redis server"
        case .cluster: return "no cluster node serves slot \(slot ?? -1) (\(configuration.displayAddress))"
        case .sentinel(_, let name): return "the sentinels name no reachable primary for '\(name)'"
        }
    }

    /// The pool for `address`, opened on first use.
    func pool(_ address: Address) throws -> RedisNodePool {
        try state.withLock { state in
            if state.closed { throw RedisError(.poolClosed, "the Redis pool was closed") }
            if let pool = state.pools[address] { return pool }
            let pool = RedisNodePool(
                configuration: nodeConfiguration(address), maximumConnections: maximumConnections,
                name: state.pools.isEmpty ? name : "\(name)@\(address.port)", logger: logger)
            state.pools[address] = pool
            return pool
        }
    }

    /// Writes the node pools' connections sent with more than one caller's commands.
    var sharedWrites: Int { state.withLock { $0.pools.values.reduce(0) { $0 + $1.sharedWrites } } }

    private func dropPool(_ address: Address) {
        let pool = state.withLock { state in
            defer { state.pools[address] = nil }
            return state.pools[address]
        }
        pool?.close()
    }

    func close() {
        let (pools, watcher, refreshing) = state.withLock { state in
            state.closed = true
            defer { state.pools = [:] }
            return (Array(state.pools.values), state.watcher, state.refreshing)
        }
        watcher?.cancel()
        refreshing?.cancel()
        for pool in pools { pool.close() }
    }

    // MARK: Running commands

    /// Runs `commands` where their slots live and returns the replies in order; a pipeline
    /// spanning servers is split per server (sent concurrently) and put back together.
    /// Error replies come back in place; a connection failure after the commands were sent
    /// throws (they may have run).
    func execute(_ commands: [RoutedCommand], timeout: Duration?, through source: any RedisConnectionSource) async throws -> [RedisReply] {
        if isStandalone { return try await executeStandalone(commands, timeout: timeout, through: source) }
        // The common case first: every command on one known server, one round trip, no
        // redirection. Anything else (several servers, MOVED, ASK, failures) takes the loop.
        var replies: [RedisReply]
        var todo: [Int]
        if let address = commonAddress(commands) {
            var wire = commands.map(\.command)
            let wait = waitCommand(for: commands)
            if let wait { wire.append(wait) }
            do {
                replies = try await source.pipeline(wire, to: address, timeout: timeout)
                if wait != nil { checkWait(replies.popLast()) }
                todo = replies.indices.filter { needsAnotherTry(replies[$0], commands[$0]) }
                if todo.isEmpty { return replies }
            } catch let error as RedisError where error.code == .connectionFailed {
                replies = [RedisReply](repeating: .null, count: commands.count)
                todo = Array(commands.indices)
            } catch let error as RedisError where error.code == .connectionLost || error.code == .timeout {
                dropPool(address)
                requestRefresh()
                throw error
            }
        } else {
            replies = [RedisReply](repeating: .null, count: commands.count)
            todo = Array(commands.indices)
        }
        return try await resolve(commands, replies: replies, todo: todo, timeout: timeout, through: source)
    }

    /// The one server all `commands` go to, when the map names one.
    private func commonAddress(_ commands: [RoutedCommand]) -> Address? {
        state.withLock { state in
            guard !state.primaries.isEmpty else { return nil }
            var common = -1
            for command in commands {
                var index = 0
                if let slot = command.slot {
                    guard slot < state.slots.count else { return nil }
                    index = Int(state.slots[slot])
                }
                if index < 0 || index >= state.primaries.count || (common >= 0 && index != common) { return nil }
                common = index
            }
            return common >= 0 ? state.primaries[common] : nil
        }
    }

    /// Whether a reply says the command did not run there and should go again (elsewhere, later, or by EVAL).
    private func needsAnotherTry(_ reply: RedisReply, _ command: RoutedCommand) -> Bool {
        guard case .error(let message) = reply else { return false }
        if message.hasPrefix("MOVED ") || message.hasPrefix("ASK ") { return true }
        if message.hasPrefix("NOSCRIPT") { return command.script != nil }
        return Self.settling.contains { message.hasPrefix($0) }
    }

    /// Sends `todo` until each has a final reply: follows MOVED and ASK, resends by EVAL on
    /// NOSCRIPT, waits out failovers and migrations for up to `reconnectTimeout`.
    private func resolve(
        _ commands: [RoutedCommand], replies: [RedisReply], todo: [Int], timeout: Duration?, through source: any RedisConnectionSource
    ) async throws -> [RedisReply] {
        var replies = replies
        var todo = todo
        var redirect: [Int: (address: Address, asking: Bool)] = [:]
        var bySource = Set<Int>()
        var settling = false
        // Replies the fast path already got: the redirect they name applies to the next send.
        for index in todo {
            guard case .error(let message) = replies[index] else { continue }
            if message.hasPrefix("MOVED "), let (slot, target) = Self.redirection(message) {
                RedisClientMetrics.shared.redirects.increment()
                learn(slot: slot, at: target)
                requestRefresh()
                redirect[index] = (target, false)
            } else if message.hasPrefix("ASK "), let (_, target) = Self.redirection(message) {
                RedisClientMetrics.shared.redirects.increment()
                redirect[index] = (target, true)
            } else if message.hasPrefix("NOSCRIPT") {
                bySource.insert(index)
            } else {
                // CLUSTERDOWN, READONLY, TRYAGAIN...: the deployment is changing; give it a moment.
                if !message.hasPrefix("TRYAGAIN") { requestRefresh() }
                settling = true
            }
        }
        if settling { try await Task.sleep(for: .milliseconds(20)) }
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.reconnectTimeout
        var pause = Duration.milliseconds(20)
        var rounds = 0
        while !todo.isEmpty {
            rounds += 1
            var groups: [(Address, [Int])] = []
            var again: [Int] = []
            var settle = false
            var failure: RedisError?
            for index in todo {
                let target: Address?
                if let redirected = redirect[index] {
                    target = redirected.address
                } else {
                    target = try? await address(forSlot: commands[index].slot)
                }
                guard let address = target else {
                    // Nobody serves the slot now (a failover under way): ask again shortly.
                    again.append(index)
                    settle = true
                    failure = RedisError(.connectionFailed, noRouteMessage(commands[index].slot))
                    continue
                }
                if let group = groups.lastIndex(where: { $0.0 == address }) {
                    groups[group].1.append(index)
                } else {
                    groups.append((address, [index]))
                }
            }
            let outcomes = groups.isEmpty ? [] : try await send(groups, commands, redirect, bySource, timeout, source)
            for (address, indices, outcome) in outcomes {
                switch outcome {
                case .failure(let error) where error.code == .connectionFailed:
                    // Nothing was sent: the server is gone. Find who serves these slots now.
                    logger.debug("cannot reach a node; reading the topology again", metadata: ["node": "\(address)"])
                    for index in indices { redirect[index] = nil }
                    again += indices
                    settle = true
                    failure = error
                case .failure(let error):
                    if error.code == .connectionLost || error.code == .timeout {
                        // The other idle connections to that server are likely dead too: drop them,
                        // so the next command connects afresh (and, if the server is gone, is retried).
                        dropPool(address)
                        requestRefresh()
                    }
                    throw error
                case .success(let raw):
                    for (index, reply) in zip(indices, raw) {
                        guard case .error(let message) = reply else {
                            replies[index] = reply
                            continue
                        }
                        replies[index] = reply
                        if message.hasPrefix("MOVED "), let (slot, target) = Self.redirection(message) {
                            RedisClientMetrics.shared.redirects.increment()
                            learn(slot: slot, at: target)
                            requestRefresh()
                            redirect[index] = (target, false)
                            again.append(index)
                        } else if message.hasPrefix("ASK "), let (_, target) = Self.redirection(message) {
                            RedisClientMetrics.shared.redirects.increment()
                            redirect[index] = (target, true)
                            again.append(index)
                        } else if message.hasPrefix("NOSCRIPT"), commands[index].script != nil, !bySource.contains(index) {
                            bySource.insert(index)
                            again.append(index)
                        } else if Self.settling.contains(where: { message.hasPrefix($0) }) {
                            // Not run: a failover or a slot migration is under way.
                            if !message.hasPrefix("TRYAGAIN") { requestRefresh() }
                            redirect[index] = redirect[index]?.asking == true ? redirect[index] : nil
                            again.append(index)
                            settle = true
                        }
                    }
                }
            }
            if again.isEmpty { break }
            if clock.now >= deadline || rounds > 64 {
                if let failure, again.contains(where: { replies[$0] == .null }) { throw failure }
                break
            }
            if settle {
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(500))
                if failure != nil { await refresh() }
            }
            todo = again.sorted()
        }
        return replies
    }

    /// `WAIT N ms` when replicas must confirm writes and `commands` may write.
    func waitCommand(for commands: some Sequence<RoutedCommand>) -> [String]? {
        guard configuration.replicaAcknowledgements > 0 else { return nil }
        guard commands.contains(where: { $0.confirmed && !Self.readOnly.contains($0.command.first?.uppercased() ?? "") }) else {
            return nil
        }
        return ["WAIT", String(configuration.replicaAcknowledgements), String(configuration.replicaTimeout.milliseconds)]
    }

    func checkWait(_ reply: RedisReply?) {
        guard let confirmed = reply?.int, confirmed < configuration.replicaAcknowledgements else { return }
        RedisClientMetrics.shared.unreplicatedWrites.increment()
        logger.warning("writes not confirmed by enough replicas in time", metadata: ["replicas": "\(confirmed)"])
    }

    /// Commands that never write (and blocking ones, which need no WAIT behind them).
    private static let readOnly: Set<String> = [
        "GET", "MGET", "HGET", "HMGET", "HGETALL", "HLEN", "HEXISTS", "LRANGE", "LLEN", "LINDEX", "LPOS", "ZCARD", "ZRANGE",
        "ZREVRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCOUNT", "SMEMBERS", "SCARD", "SISMEMBER", "EXISTS", "TYPE", "TTL", "PTTL",
        "STRLEN", "PING", "INFO", "CLUSTER", "CLIENT", "CONFIG", "ROLE", "TIME", "DBSIZE", "SCAN", "KEYS", "MEMORY", "OBJECT",
        "ECHO", "COMMAND", "BLMOVE", "BRPOPLPUSH", "BLPOP", "BRPOP", "WAIT", "ASKING", "READONLY", "EVALSHA_RO", "EVAL_RO",
    ]

    /// Replies that mean "not run, try again once the deployment has settled".
    static let settling = ["TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "LOADING"]

    private func executeStandalone(
        _ commands: [RoutedCommand], timeout: Duration?, through source: any RedisConnectionSource
    ) async throws -> [RedisReply] {
        let address = configuration.address
        var wire = commands.map(\.command)
        let wait = waitCommand(for: commands)
        if let wait { wire.append(wait) }
        var replies = try await source.pipeline(wire, to: address, timeout: timeout)
        if wait != nil { checkWait(replies.popLast()) }
        let missing = replies.indices.filter { index in
            guard commands[index].script != nil, case .error(let message) = replies[index] else { return false }
            return message.hasPrefix("NOSCRIPT")
        }
        if !missing.isEmpty {
            logger.debug("script not cached by the server; sending its source")
            var resend = missing.map { commands[$0].bySource ?? commands[$0].command }
            if let wait { resend.append(wait) }
            var again = try await source.pipeline(resend, to: address, timeout: timeout)
            if wait != nil { checkWait(again.popLast()) }
            for (index, reply) in zip(missing, again) { replies[index] = reply }
        }
        return replies
    }

    private typealias Outcome = (Address, [Int], Result<[RedisReply], RedisError>)

    /// One round trip per server, concurrently when there are several.
    private func send(
        _ groups: [(Address, [Int])], _ commands: [RoutedCommand], _ redirect: [Int: (address: Address, asking: Bool)],
        _ bySource: Set<Int>, _ timeout: Duration?, _ source: any RedisConnectionSource
    ) async throws -> [Outcome] {
        @Sendable func one(_ address: Address, _ indices: [Int], _ wire: [[String]], _ positions: [Int]) async -> Outcome {
            do {
                let raw = try await source.pipeline(wire, to: address, timeout: timeout)
                if wire.count > positions.count, wire.last?.first == "WAIT" { checkWait(raw.last) }
                return (address, indices, .success(positions.map { raw[$0] }))
            } catch let error as RedisError {
                return (address, indices, .failure(error))
            } catch {
                return (address, indices, .failure(RedisError(.connectionLost, "\(error)")))
            }
        }
        var prepared: [(Address, [Int], [[String]], [Int])] = []
        for (address, indices) in groups {
            var wire: [[String]] = []
            var positions: [Int] = []
            wire.reserveCapacity(indices.count + 1)
            for index in indices {
                if redirect[index]?.asking == true { wire.append(["ASKING"]) }
                positions.append(wire.count)
                wire.append(bySource.contains(index) ? commands[index].bySource ?? commands[index].command : commands[index].command)
            }
            if let wait = waitCommand(for: indices.lazy.map { commands[$0] }) { wire.append(wait) }
            prepared.append((address, indices, wire, positions))
        }
        if prepared.count == 1, let (address, indices, wire, positions) = prepared.first {
            return [await one(address, indices, wire, positions)]
        }
        return await withTaskGroup(of: Outcome.self) { group in
            for (address, indices, wire, positions) in prepared { group.addTask { await one(address, indices, wire, positions) } }
            var outcomes: [Outcome] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
    }

    /// `MOVED 3999 127.0.0.1:6381` / `ASK ...` -> (3999, 127.0.0.1:6381).
    static func redirection(_ message: String) -> (Int, Address)? {
        let parts = message.split(separator: " ")
        guard parts.count >= 3, let slot = Int(parts[1]), let address = try? RedisConfiguration.address(String(parts[2])) else {
            return nil
        }
        return (slot, address)
    }

    /// Takes a MOVED at its word for one slot until the next full refresh.
    private func learn(slot: Int, at address: Address) {
        state.withLock { state in
            guard slot >= 0, slot < state.slots.count else { return }
            if let index = state.primaries.firstIndex(of: address) {
                state.slots[slot] = Int16(index)
            } else if state.primaries.count < Int(Int16.max) {
                state.primaries.append(address)
                state.slots[slot] = Int16(state.primaries.count - 1)
            }
        }
    }

    // MARK: Reading the topology

    /// Reads the topology again in the background, at most every 100 ms.
    func requestRefresh() {
        guard !isStandalone else { return }
        let recent = state.withLock { state in
            state.refreshing != nil || state.lastRefresh.map { ContinuousClock.now - $0 < .milliseconds(100) } ?? false
        }
        if !recent { Task { await self.refresh() } }
    }

    /// Reads the topology now; callers that arrive while a read is under way share it.
    func refresh() async {
        guard !isStandalone else { return }
        let task: Task<Void, Never>? = state.withLock { state in
            if state.closed { return nil }
            if let running = state.refreshing { return running }
            let task = Task {
                await self.readTopology()
                self.state.withLock { state in
                    state.refreshing = nil
                    state.lastRefresh = ContinuousClock.now
                }
            }
            state.refreshing = task
            return task
        }
        await task?.value
    }

    private func readTopology() async {
        RedisClientMetrics.shared.topologyReads.increment()
        switch configuration.topology {
        case .standalone: return
        case .cluster(let seeds):
            let candidates = state.withLock { state in
                var seen = Set<Address>()
                return (state.primaries + state.known + seeds).filter { seen.insert($0).inserted }
            }
            for address in candidates {
                do {
                    let map = try await ClusterMap.read(from: address, configuration: nodeConfiguration(address), logger: logger)
                    install(cluster: map)
                    return
                } catch {
                    logger.debug("could not read the cluster map", metadata: ["node": "\(address)", "error": "\(error)"])
                }
            }
            logger.warning("no cluster node answered for the map", metadata: ["nodes": "\(candidates.count)"])
        case .sentinel(let sentinels, let primaryName):
            startWatcher(sentinels: sentinels, primaryName: primaryName)
            if let primary = await SentinelPrimary.find(
                primaryName, sentinels: sentinels, template: nodeTemplate, logger: logger)
            {
                install(primary: primary)
            }
        }
    }

    private func install(cluster map: ClusterMap) {
        let stale: [RedisNodePool] = state.withLock { state in
            state.primaries = map.primaries
            state.slots = map.slots
            state.known = map.nodes
            let keep = Set(map.primaries)
            let stale = state.pools.filter { !keep.contains($0.key) }
            for address in stale.keys { state.pools[address] = nil }
            return Array(stale.values)
        }
        for pool in stale { pool.close() }
    }

    func install(primary: Address) {
        let (stale, changed): ([RedisNodePool], Bool) = state.withLock { state in
            let changed = state.primaries != [primary]
            state.primaries = [primary]
            let stale = state.pools.filter { $0.key != primary }
            for address in stale.keys { state.pools[address] = nil }
            return (Array(stale.values), changed)
        }
        if changed { logger.notice("Redis primary", metadata: ["address": "\(primary)"]) }
        for pool in stale { pool.close() }
    }

    /// Sentinel: listens for `+switch-master` so the client moves at once, not only on its
    /// next failed command.
    private func startWatcher(sentinels: [Address], primaryName: String) {
        let (template, logger) = (nodeTemplate, logger)
        state.withLock { state in
            guard state.watcher == nil, !state.closed else { return }
            let weakSelf = WeakRouter(self)
            state.watcher = Task {
                await SentinelPrimary.watch(primaryName, sentinels: sentinels, template: template, logger: logger) { primary in
                    guard let router = weakSelf.router else { return false }
                    router.install(primary: primary)
                    return true
                }
            }
        }
    }
}

/// A weak reference the sentinel watcher holds, so it stops once nobody holds the router.
private final class WeakRouter: Sendable {
    private let reference: Mutex<WeakBox>
    private struct WeakBox { weak var router: RedisRouter? }
    init(_ router: RedisRouter) { reference = Mutex(WeakBox(router: router)) }
    var router: RedisRouter? { reference.withLock { $0.router } }
}
