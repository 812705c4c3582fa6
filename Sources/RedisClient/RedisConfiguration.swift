import Foundation

/// Where and how to connect to Redis.
public struct RedisConfiguration: Sendable, Hashable {
    public var host: String
    public var port: Int
    /// ACL user name for `AUTH user password`; `nil` uses `AUTH password`.
    public var username: String?
    public var password: String?
    public var database: Int
    public var connectTimeout: Duration
    /// Longest wait for any reply; blocking commands add their own server-side timeout to it.
    public var commandTimeout: Duration
    /// Longest time spent reconnecting (with backoff) before a command fails.
    public var reconnectTimeout: Duration

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

    /// Reads `redis://[[user]:password@]host[:port][/database]`.
    public init(url: String) throws {
        guard let components = URLComponents(string: url), components.scheme == "redis" else {
            throw RedisError(.invalidURL, "expected redis://[[user]:password@]host[:port][/db]")
        }
        self.init()
        if let host = components.host, !host.isEmpty { self.host = host }
        if let port = components.port { self.port = port }
        if let user = components.user, !user.isEmpty { username = user.removingPercentEncoding ?? user }
        if let password = components.password, !password.isEmpty {
            self.password = password.removingPercentEncoding ?? password
        }
        let path = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        if !path.isEmpty {
            guard let database = Int(path), database >= 0 else {
                throw RedisError(.invalidURL, "the database in a redis:// URL must be a number, got '\(path)'")
            }
            self.database = database
        }
    }

    /// The address without credentials, fit for logs.
    public var displayAddress: String { "redis://\(host):\(port)/\(database)" }
}

// The configuration may hold a password: what prints of it is the address without credentials.
extension RedisConfiguration: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "RedisConfiguration(\(displayAddress), password: \(password == nil ? "none" : "<redacted>"))" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
