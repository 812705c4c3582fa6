import Foundation

/// Where and how to connect to Redis: one server, a Redis Cluster, or a primary that
/// Sentinel watches.
public struct RedisConfiguration: Sendable, Hashable {
    /// A server's address.
    public struct Address: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// What kind of deployment the client talks to.
    public enum Topology: Sendable, Hashable {
        /// One server at `host:port`.
        case standalone
        /// A Redis Cluster, found through any of these nodes.
        case cluster(seeds: [Address])
        /// The primary named `primaryName`, as these sentinels report it.
        case sentinel(sentinels: [Address], primaryName: String)
    }

    /// The server (standalone); for a cluster or Sentinel, the node the client talks to now.
    public var host: String
    public var port: Int
    public var topology: Topology = .standalone
    /// ACL user name for `AUTH user password`; `nil` uses `AUTH password`.
    public var username: String?
    public var password: String?
    public var database: Int
    public var connectTimeout: Duration
    /// Longest wait for any reply; blocking commands add their own server-side timeout to it.
    public var commandTimeout: Duration
    /// Longest time spent reconnecting (with backoff), or, on a cluster or Sentinel, finding
    /// the node that now serves a key, before a command fails.
    public var reconnectTimeout: Duration
    /// Writes are answered only once this many replicas have them too (`WAIT`, sent in the
    /// same round trip), so a primary that dies right after cannot take an acknowledged
    /// write with it. 0 (the default) answers when the primary has it. URL: `?replicas=N`.
    public var replicaAcknowledgements = 0
    /// The longest `WAIT` for those replicas; a write they did not confirm in time is still
    /// answered (it did happen on the primary) and counted in `entitle_redis_unreplicated_writes_total`.
    public var replicaTimeout: Duration = .seconds(1)
    /// The `redis://` address spreads keys over several servers by hash slot (a proxy such
    /// as twemproxy or Envoy, a sharded managed Redis): no script may name keys of two
    /// slots, as on a cluster, even where the endpoint itself would not refuse one. URL:
    /// `?sharded=yes`.
    public var sharded = false

    /// Whether one server (or Sentinel's primary) holds every key, so one call may name keys
    /// of several slots (`RedisConnectionPool.run(_:keys:otherSlotKeys:arguments:)`): not on
    /// a cluster, nor behind a sharded address.
    public var holdsEveryKeyOnOneServer: Bool {
        if case .cluster = topology { return false }
        return !sharded
    }

    /// Whether one server runs a pipeline's calls in the order sent: a single server only.
    /// A cluster splits a pipeline per server; behind Sentinel the client sends again, a round
    /// trip later, a call refused while the deployment changes (READONLY, LOADING), after the
    /// calls beside it ran. Anywhere, a script sent by its SHA that the server lacks is sent
    /// again after the others (`RedisCall.scriptInPlace` is not).
    public var runsPipelinesInOrder: Bool {
        if case .standalone = topology { return !sharded }
        return false
    }

    public init(
        host: String = "127.0.0.1", port: Int = 6379, username: String? = nil, password: String? = nil,
        database: Int = 0, connectTimeout: Duration = .seconds(2), commandTimeout: Duration = .seconds(5),
        reconnectTimeout: Duration = .seconds(10)
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connectTimeout = connectTimeout
        self.commandTimeout = commandTimeout
        self.reconnectTimeout = reconnectTimeout
    }

    /// Reads one of:
    /// - `redis://[[user]:password@]host[:port][/database]`
    /// - `redis+cluster://[[user]:password@]host:port[,host:port...]` (seed nodes; database 0 only)
    /// - `redis+sentinel://[[user]:password@]host:port[,host:port...]/primaryName[/database]`
    ///   (the credentials are the data nodes'; the sentinels are asked without them)
    ///
    /// Each takes `?replicas=N[&replicaTimeoutMs=M]` (see `replicaAcknowledgements`).
    public init(url: String) throws {
        guard let schemeEnd = url.range(of: "://") else { throw Self.usage }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var rest = Substring(url[schemeEnd.upperBound...])
        var query: Substring = ""
        if let mark = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) {
            if rest[mark] == "?" { query = rest[rest.index(after: mark)...].prefix { $0 != "#" } }
            rest = rest[..<mark]
        }
        let pathStart = rest.firstIndex(of: "/")
        let authority = pathStart.map { rest[..<$0] } ?? rest
        let path = pathStart.map { rest[rest.index(after: $0)...] }.map(String.init) ?? ""
        self.init()
        var hosts = authority
        if let at = authority.lastIndex(of: "@") {
            let credentials = authority[..<at]
            hosts = authority[authority.index(after: at)...]
            let parts = credentials.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            if let user = parts.first, !user.isEmpty { username = user.removingPercentEncoding ?? user }
            if parts.count == 2, !parts[1].isEmpty { password = parts[1].removingPercentEncoding ?? parts[1] }
        }
        let addresses = try hosts.split(separator: ",", omittingEmptySubsequences: false).map { try Self.address(String($0)) }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        switch scheme {
        case "redis":
            guard addresses.count == 1, segments.count <= 1 else { throw Self.usage }
            try setDatabase(segments.first)
        case "redis+cluster":
            guard !addresses.isEmpty, segments.isEmpty else {
                throw RedisError(
                    .invalidURL, "expected redis+cluster://[[user]:password@]host:port[,host:port...] (a cluster has only database 0)")
            }
            topology = .cluster(seeds: addresses)
        case "redis+sentinel":
            guard !addresses.isEmpty, let name = segments.first, segments.count <= 2 else {
                throw RedisError(.invalidURL, "expected redis+sentinel://[[user]:password@]host:port[,host:port...]/primaryName[/db]")
            }
            topology = .sentinel(sentinels: addresses, primaryName: name.removingPercentEncoding ?? name)
            try setDatabase(segments.count == 2 ? segments[1] : nil)
        default:
            throw Self.usage
        }
        host = addresses[0].host
        port = addresses[0].port
        for item in query.split(separator: "&") {
            let pair = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2 else { throw RedisError(.invalidURL, "bad URL parameter '\(item)'") }
            switch pair[0] {
            case "replicas":
                guard let value = Int(pair[1]), (0...16).contains(value) else {
                    throw RedisError(.invalidURL, "replicas= takes 0-16, got '\(pair[1])'")
                }
                replicaAcknowledgements = value
            case "replicaTimeoutMs":
                guard let value = Int(pair[1]), (1...60_000).contains(value) else {
                    throw RedisError(.invalidURL, "replicaTimeoutMs= takes 1-60000, got '\(pair[1])'")
                }
                replicaTimeout = .milliseconds(value)
            case "sharded":
                guard ["yes", "no"].contains(pair[1]) else { throw RedisError(.invalidURL, "sharded= takes yes or no, got '\(pair[1])'") }
                sharded = pair[1] == "yes"
            default:
                throw RedisError(.invalidURL, "unknown URL parameter '\(pair[0])' (known: replicas, replicaTimeoutMs, sharded)")
            }
        }
    }

    private static let usage = RedisError(
        .invalidURL,
        "expected redis://[[user]:password@]host[:port][/db], redis+cluster://host:port,... or redis+sentinel://host:port,.../primary")

    private mutating func setDatabase(_ text: String?) throws {
        guard let text, !text.isEmpty else { return }
        guard let database = Int(text), database >= 0 else {
            throw RedisError(.invalidURL, "the database in a Redis URL must be a number, got '\(text)'")
        }
        self.database = database
    }

    /// `host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults to 6379 (26379 is not guessed for sentinels).
    static func address(_ text: String) throws -> Address {
        var host = Substring(text)
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { throw RedisError(.invalidURL, "unclosed [ in '\(text)'") }
            let after = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw RedisError(.invalidURL, "bad address '\(text)'") }
                portText = after.dropFirst()
            }
        } else if let colon = host.lastIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        guard !host.isEmpty else { throw RedisError(.invalidURL, "a Redis address needs a host, got '\(text)'") }
        var port = 6379
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else {
                throw RedisError(.invalidURL, "the port in '\(text)' must be 1-65535")
            }
            port = value
        }
        return Address(host: String(host), port: port)
    }

    /// The address without credentials, fit for logs.
    public var displayAddress: String {
        switch topology {
        case .standalone: return "redis://\(host):\(port)/\(database)"
        case .cluster(let seeds): return "redis+cluster://" + seeds.map(\.description).joined(separator: ",")
        case .sentinel(let sentinels, let name):
            return "redis+sentinel://" + sentinels.map(\.description).joined(separator: ",") + "/\(name)/\(database)"
        }
    }

    /// The same settings for one server of the deployment.
    func node(_ address: Address) -> RedisConfiguration {
        var copy = self
        copy.host = address.host
        copy.port = address.port
        copy.topology = .standalone
        return copy
    }

    var address: Address { Address(host: host, port: port) }
}

// The configuration may hold a password: what prints of it is the address without credentials.
extension RedisConfiguration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "RedisConfiguration(\(displayAddress), password: \(password == nil ? "none" : "<redacted>"))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
