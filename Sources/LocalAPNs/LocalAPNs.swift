import Foundation

/// The local APNs' state: the provider keys it trusts, the pushes it accepted, the failures tests
/// ask for, and the count of answers by status. One actor, so a test reads one consistent record.
public actor LocalAPNs {
    /// A provider key (Apple's `.p8` key, its public half) and what it may push to.
    public struct Key: Sendable, Codable, Hashable {
        /// The 10-character Key ID, the token's `kid`.
        public var keyId: String
        /// The 10-character Team ID, the token's `iss`.
        public var teamId: String
        /// The P-256 public key in PEM (`-----BEGIN PUBLIC KEY-----`); a private key PEM also works.
        public var publicKeyPEM: String
        /// The bundle ids the key may push to; the push types' suffixes (`.voip`, `.complication`, …) on
        /// them are allowed too.
        public var topics: [String]

        public init(keyId: String, teamId: String, publicKeyPEM: String, topics: [String]) {
            self.keyId = keyId
            self.teamId = teamId
            self.publicKeyPEM = publicKeyPEM
            self.topics = topics
        }
    }

    /// A push the local APNs accepted (answered 200).
    public struct Push: Sendable, Codable, Hashable {
        /// The device token from the path, as sent.
        public var token: String
        public var topic: String
        public var pushType: String
        /// `apns-priority`; `nil` when not sent (APNs then uses 10).
        public var priority: Int?
        /// `apns-expiration`, seconds since 1970; `nil` when not sent.
        public var expiration: Int64?
        public var collapseId: String?
        /// The `apns-id` answered: the request's, or a new one; uppercase.
        public var apnsId: String
        /// The body, JSON text.
        public var payload: String
        public var keyId: String
        public var teamId: String
        /// Milliseconds since 1970.
        public var receivedAt: Int64
    }

    /// A failure to answer instead of accepting: checked after every one of Apple's request checks
    /// passed, the first matching fault wins.
    public struct Fault: Sendable, Codable, Hashable {
        /// Only pushes to this device token (case does not matter); `nil`: any token.
        public var token: String?
        /// The HTTP status, such as 410, 429, 500 or 503.
        public var status: Int
        /// Apple's reason, such as `Unregistered`, `TooManyRequests` or `ServiceUnavailable`.
        public var reason: String
        /// For 410: milliseconds since 1970 when the token stopped being valid; now when `nil`.
        public var timestamp: Int64?
        /// How many pushes fail; `nil`: every one until `clearFaults()`.
        public var count: Int?

        public init(token: String? = nil, status: Int, reason: String, timestamp: Int64? = nil, count: Int? = nil) {
            self.token = token
            self.status = status
            self.reason = reason
            self.timestamp = timestamp
            self.count = count
        }
    }

    /// The provider token a connection uses, and when it last changed.
    struct ConnectionTokens {
        var token: String
        var lastUpdate: Date?
    }

    var keys: [String: RegisteredKey] = [:]
    /// Verified tokens by their exact text, so each token's signature is checked once; refused ones too.
    var verifiedTokens: [String: Result<ProviderToken, APNsRefusal>] = [:]
    var connections: [ObjectIdentifier: ConnectionTokens] = [:]
    var accepted: [Push] = []
    var faults: [Fault] = []
    var counts: [Int: Int] = [:]

    /// Tokens cached at most; past this the cache starts over (a flood of distinct bad tokens).
    static let tokenCacheLimit = 10_000

    public init() {}

    /// Trusts `key` (replacing one with the same Key ID).
    public func register(_ key: Key) {
        keys[key.keyId] = RegisteredKey(key)
        // A token's verdict depends on the keys: verify again.
        verifiedTokens.removeAll()
    }

    /// Every push accepted (status 200), in order; kept until `clearPushes()` (a long bench clears them).
    public func pushes() -> [Push] { accepted }

    public func clearPushes() { accepted.removeAll() }

    /// Adds `fault` after those already there. One whose status is not 400 to 599, or whose `count`
    /// is below 1, is ignored: it could not be answered as an APNs error.
    public func inject(_ fault: Fault) {
        guard (400...599).contains(fault.status), (fault.count ?? 1) >= 1 else { return }
        faults.append(fault)
    }

    public func clearFaults() { faults.removeAll() }

    /// How many requests were answered with each status (for tests and the bench).
    public func statusCounts() -> [Int: Int] { counts }

    /// Forgets a closed connection's token.
    func connectionClosed(_ connection: ObjectIdentifier) {
        connections[connection] = nil
    }
}
