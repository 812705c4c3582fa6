import Entitlements
import Foundation
import Logging
import RedisClient

/// Customers' entitlements in Redis: one document per customer, written with a version
/// check (optimistic concurrency), each change published on the publisher's channel; and
/// an owner index saying which customer holds each original transaction.
///
/// Keys (`P` the publisher, `C` the customer, `T` an original transaction id):
/// - `{prefix}:ent:P:customer:C`: hash `doc` (JSON `CustomerEntitlements`), `v` (version)
/// - `{prefix}:ent:P:owner:T`: string, the customer holding T
/// - channel `{prefix}:ent:P:changes`: `{"publisher", "customer", "version"}` per change
///
/// Each operation touches one key, so the store works on Redis Cluster unchanged.
public struct EntitlementStore: Sendable {
    public let redis: RedisConnectionPool
    public let prefix: String
    private let logger: Logger

    /// How often `update` retries when another writer got there first.
    public var maximumAttempts = 8

    public init(redis: RedisConnectionPool, prefix: String = "entitle", logger: Logger) {
        self.redis = redis
        self.prefix = prefix
        self.logger = logger
    }

    func customerKey(_ publisher: String, _ customer: String) -> String { "\(prefix):ent:\(publisher):customer:\(customer)" }
    func ownerKey(_ publisher: String, _ originalTransactionId: String) -> String {
        "\(prefix):ent:\(publisher):owner:\(originalTransactionId)"
    }
    public func channel(_ publisher: String) -> String { "\(prefix):ent:\(publisher):changes" }

    /// Writes the document when the stored version is still `ARGV[1]` ("" for none), then
    /// publishes the change. Returns the new version, or 0 when someone else wrote first.
    static let compareAndSet = RedisScript(
        name: "entitlements-compare-and-set",
        source: """
            local current = redis.call('HGET', KEYS[1], 'v') or ''
            if current ~= ARGV[1] then return 0 end
            local version = (tonumber(current) or 0) + 1
            redis.call('HSET', KEYS[1], 'doc', ARGV[2], 'v', version)
            redis.call('PUBLISH', ARGV[3], ARGV[4] .. version .. '}')
            return version
            """)

    /// The customer's document and its version (0 when the customer is new).
    public func load(publisher: String, customer: String) async throws -> (state: CustomerEntitlements, version: Int) {
        let reply = try await redis.send(["HMGET", customerKey(publisher, customer), "doc", "v"])
        guard let values = reply.array, values.count == 2, let document = values[0].string else {
            return (CustomerEntitlements(publisher: publisher, customer: customer), 0)
        }
        do {
            let state = try JSONDecoder().decode(CustomerEntitlements.self, from: Data(document.utf8))
            return (state, values[1].string.flatMap { Int($0) } ?? 0)
        } catch {
            throw EntitlementStoreError(.unreadable, "the entitlements of customer \(customer) of \(publisher) cannot be read: \(error)")
        }
    }

    /// Reads the customer, lets `change` modify the document, and writes it back if nobody
    /// else wrote meanwhile (otherwise reads again and reapplies). Nothing is written when
    /// `change` leaves the document as it was. Returns what `change` returned.
    public func update<Result: Sendable>(
        publisher: String, customer: String, _ change: (inout CustomerEntitlements) throws -> Result
    ) async throws -> Result {
        for attempt in 1...maximumAttempts {
            let (stored, version) = try await load(publisher: publisher, customer: customer)
            var state = stored
            let result = try change(&state)
            if state == stored { return result }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let document = String(decoding: try encoder.encode(state), as: UTF8.self)
            let event = try Self.eventPrefix(publisher: publisher, customer: customer)
            let written = try await redis.run(
                Self.compareAndSet, keys: [customerKey(publisher, customer)],
                arguments: [version == 0 ? "" : String(version), document, channel(publisher), event])
            if let newVersion = written.int, newVersion > 0 { return result }
            logger.debug("entitlement write raced; retrying", metadata: ["attempt": "\(attempt)"])
        }
        throw EntitlementStoreError(.contended, "customer \(customer) of \(publisher) kept changing under \(maximumAttempts) attempts")
    }

    /// The start of the change event; the script appends the version and the closing brace.
    static func eventPrefix(publisher: String, customer: String) throws -> String {
        let names = try JSONSerialization.data(withJSONObject: ["publisher": publisher, "customer": customer], options: .sortedKeys)
        return String(decoding: names.dropLast(), as: UTF8.self) + ",\"version\":"
    }

    // MARK: Owners

    /// Records `customer` as the holder of `originalTransactionId` unless someone holds it;
    /// returns the holder (`customer` when the claim succeeded or it already held it).
    public func claim(publisher: String, originalTransactionId: String, for customer: String) async throws -> String {
        let key = ownerKey(publisher, originalTransactionId)
        let replies = try await redis.pipeline([["SET", key, customer, "NX"], ["GET", key]])
        return replies.last?.string ?? customer
    }

    /// Moves `originalTransactionId` to `customer` (a transfer).
    public func setOwner(publisher: String, originalTransactionId: String, to customer: String) async throws {
        _ = try await redis.send(["SET", ownerKey(publisher, originalTransactionId), customer])
    }

    public func owner(publisher: String, originalTransactionId: String) async throws -> String? {
        try await redis.send(["GET", ownerKey(publisher, originalTransactionId)]).string
    }
}
