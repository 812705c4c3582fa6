import Entitlements
import Foundation
import RedisClient
import Reporting

/// The event log: per publisher, one Redis stream per partition of its customers
/// (`EntitlementKeys.events`), appended by `EntitlementStore.update` in the same script that
/// writes the customer. Each entry is a lifecycle event (field `Z`, a `CompactEvent`
/// deflated, `DeflatedEntry`; `E`, compact, and `e`, the long form, as versions before it
/// wrote: `Format`) or a change of report pieces (field `D`, deflated; `d` before).
/// Readers: the customer's timeline (`customerEvents`, through the ids the customer keeps in
/// `ev`), the reports (`entries`, partition by partition).
package struct EventLog: Sendable {
    package let redis: RedisConnectionPool
    package let keys: EntitlementKeys

    package init(redis: RedisConnectionPool, keys: EntitlementKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// One entry of the log.
    package enum Entry: Sendable {
        case event(LifecycleEvent)
        case delta(ReportDelta, customer: String)
        /// An entry this version cannot read (a newer writer's): skipped, and counted.
        case unreadable
    }

    /// A change of report pieces, with whose they are.
    struct DeltaRecord: Codable {
        var c: String
        var r: [ReportPiece]?
        var a: [ReportPiece]?
    }

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }()

    package static func encode(_ event: LifecycleEvent) throws -> String { EventLogJSON.encode(event) }

    /// How entries are written (every form is read).
    package enum Format: String, Sendable, CaseIterable {
        /// Compact entries deflated (fields `Z` and `D`, `DeflatedEntry`), the default.
        case deflated
        /// Compact entries (field `E`, `CompactEvent`; `d` for report pieces), as versions
        /// before the deflated entries wrote and read.
        case compact
        /// Every field by its long name (field `e`), as versions before the compact entries
        /// wrote and read.
        case long
    }

    /// An event's entry: deflated (field `Z`), or as versions before it wrote (fields `E` and
    /// `e`, for a rolling upgrade).
    package static func entry(_ event: LifecycleEvent, format: Format) throws -> (field: String, value: String) {
        switch format {
        case .deflated: ("Z", try DeflatedEntry.encode(CompactEvent.encode(event)))
        case .compact: ("E", CompactEvent.encode(event))
        case .long: ("e", EventLogJSON.encode(event))
        }
    }

    /// A change of report pieces' entry: deflated (field `D`), or as versions before it wrote
    /// (`d`).
    package static func entry(_ delta: ReportDelta, customer: String, format: Format) throws -> (field: String, value: String) {
        let json = EventLogJSON.encode(delta, customer: customer)
        return format == .deflated ? ("D", try DeflatedEntry.encode(json)) : ("d", json)
    }

    package static func encode(_ delta: ReportDelta, customer: String) throws -> String { EventLogJSON.encode(delta, customer: customer) }

    /// The compact entries' short name of each field of an event (`CompactEvent`).
    package static var compactNames: [String: String] { CompactEvent.shortNames }

    /// An entry of `publisher`'s log.
    package static func decode(field: String, value: String, publisher: String) -> Entry {
        if field == "Z" || field == "D" {
            // Deflated: the compact event, or the pieces, inside.
            guard let json = DeflatedEntry.decode(value) else { return .unreadable }
            return decode(field: field == "Z" ? "E" : "d", value: json, publisher: publisher)
        }
        if field == "E" { return CompactEvent.decode(value, publisher: publisher).map(Entry.event) ?? .unreadable }
        // The fast reader first; what it does not know, `JSONDecoder`.
        if field == "e", let event = EventLogReader.event(value) { return .event(event) }
        if field == "d", let (delta, customer) = EventLogReader.delta(value) { return .delta(delta, customer: customer) }
        do {
            switch field {
            case "e": return .event(try decoder.decode(LifecycleEvent.self, from: Data(value.utf8)))
            case "d":
                let record = try decoder.decode(DeltaRecord.self, from: Data(value.utf8))
                return .delta(ReportDelta(removed: record.r ?? [], added: record.a ?? []), customer: record.c)
            default: return .unreadable
            }
        } catch {
            return .unreadable
        }
    }

    /// Entries of one partition after stream id `after` ("0" for the start), oldest first, at
    /// most `count`.
    package func entries(publisher: String, partition: Int, after: String, count: Int) async throws -> [(id: String, entry: Entry)] {
        let reply = try await redis.send([
            "XRANGE", keys.events(publisher, partition: partition), "(" + after, "+", "COUNT", String(count),
        ])
        return Self.parse(reply, publisher: publisher)
    }

    /// `entries` for every partition at once (one pipelined round trip): partition by partition,
    /// the entries after its cursor.
    package func entries(publisher: String, after cursors: [String], count: Int) async throws -> [[(id: String, entry: Entry)]] {
        let replies = try await redis.pipeline(
            cursors.enumerated().map { partition, cursor in
                ["XRANGE", keys.events(publisher, partition: partition), "(" + cursor, "+", "COUNT", String(count)]
            })
        return replies.map { Self.parse($0, publisher: publisher) }
    }

    static func parse(_ reply: RedisReply, publisher: String) -> [(id: String, entry: Entry)] {
        (reply.array ?? []).compactMap { item in
            guard let parts = item.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].array, fields.count >= 2,
                let field = fields[0].string, let value = fields[1].string
            else { return nil }
            return (id, decode(field: field, value: value, publisher: publisher))
        }
    }

    /// The last entry id of each partition (`"0"` when it is empty): where a fold that wants
    /// everything written so far stops.
    package func heads(publisher: String) async throws -> [String] {
        var heads: [String] = []
        for partition in 0..<EntitlementKeys.partitions {
            let reply = try await redis.send(["XREVRANGE", keys.events(publisher, partition: partition), "+", "-", "COUNT", "1"])
            heads.append(Self.parse(reply, publisher: publisher).first?.id ?? "0")
        }
        return heads
    }

    /// A customer's lifecycle events, newest first: at most `limit`, older than the entry id
    /// `before` when given; with the id to ask from for the next page, when there is one.
    package func customerEvents(
        publisher: String, customer: String, before: String?, limit: Int
    ) async throws -> (events: [(id: String, event: LifecycleEvent)], next: String?) {
        let fields = try await redis.send(["HMGET", keys.customer(publisher, customer), "doc", "ev"]).array ?? []
        let listed = try StoredCustomer.Record(stored: fields.first?.string, events: fields.last?.string)?.events ?? ""
        var ids = listed.split(separator: " ").map(String.init).reversed().map { $0 }
        if let before { ids = ids.filter { Self.isEarlier($0, than: before) } }
        let page = Array(ids.prefix(limit))
        guard !page.isEmpty else { return ([], nil) }
        let stream = keys.events(publisher, customer: customer)
        let replies = try await redis.pipeline(page.map { ["XRANGE", stream, $0, $0] })
        var events: [(id: String, event: LifecycleEvent)] = []
        for (id, reply) in zip(page, replies) {
            // An entry the log trimmed (older than the publisher's retention) is gone from the page.
            guard case .event(let event)? = Self.parse(reply, publisher: publisher).first?.entry else { continue }
            events.append((id, event))
        }
        return (events, ids.count > page.count ? page.last : nil)
    }

    /// Whether stream id `a` (`ms-seq`) is before `b`.
    package static func isEarlier(_ a: String, than b: String) -> Bool {
        func parts(_ id: String) -> (Int64, Int64) {
            let pieces = id.split(separator: "-", maxSplits: 1)
            return (Int64(pieces.first ?? "") ?? 0, pieces.count > 1 ? Int64(pieces[1]) ?? 0 : 0)
        }
        return parts(a) < parts(b)
    }

    /// Whether `text` is a stream id (`ms-seq`).
    package static func isStreamId(_ text: String) -> Bool {
        let pieces = text.split(separator: "-", omittingEmptySubsequences: false)
        return pieces.count == 2 && pieces.allSatisfy { (1...20).contains($0.count) && $0.allSatisfy(\.isASCIIDigit) }
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
