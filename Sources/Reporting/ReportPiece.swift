import Foundation

/// A stretch of time during which a customer counted in one of the reports' running totals:
/// a subscription paying, in a free trial, in a grace period or in billing retry, or a
/// customer holding credits. Reports count a piece on each day it is still going at the end
/// of (from midnight after `from` to the midnight at or after `to`).
public struct ReportPiece: Sendable, Hashable, Codable {
    public enum Phase: String, Sendable, Hashable, Codable, CaseIterable {
        case trial, paying, grace, billingRetry, credits
    }

    public var phase: Phase
    public var from: Date
    /// `nil` while it goes on.
    public var to: Date?
    public var productId: String
    public var offerId: String
    public var storefront: String
    public var currency: String
    /// Paying pieces: the price normalised to a month, in milliunits of `currency`.
    public var monthly: Int64?
    /// The report it counts in: its transaction's environment.
    public var environment: ReportEnvironment

    public init(
        phase: Phase, from: Date, to: Date?, productId: String = "", offerId: String = "", storefront: String = "",
        currency: String = "", monthly: Int64? = nil, environment: ReportEnvironment = .production
    ) {
        self.phase = phase
        self.from = from
        self.to = to
        self.productId = productId
        self.offerId = offerId
        self.storefront = storefront
        self.currency = currency
        self.monthly = monthly
        self.environment = environment
    }

    // Short keys and millisecond dates: pieces are written into the event log with every change.
    enum CodingKeys: String, CodingKey {
        case phase = "p", from = "f", to = "t", productId = "pr", offerId = "o", storefront = "s", currency = "c", monthly = "m"
        case environment = "e"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        phase = try container.decode(Phase.self, forKey: .phase)
        from = Date(timeIntervalSince1970: Double(try container.decode(Int64.self, forKey: .from)) / 1000)
        to = try container.decodeIfPresent(Int64.self, forKey: .to).map { Date(timeIntervalSince1970: Double($0) / 1000) }
        productId = try container.decodeIfPresent(String.self, forKey: .productId) ?? ""
        offerId = try container.decodeIfPresent(String.self, forKey: .offerId) ?? ""
        storefront = try container.decodeIfPresent(String.self, forKey: .storefront) ?? ""
        currency = try container.decodeIfPresent(String.self, forKey: .currency) ?? ""
        monthly = try container.decodeIfPresent(Int64.self, forKey: .monthly)
        // Production pieces leave it out, as every piece did before environments were kept.
        environment = try container.decodeIfPresent(ReportEnvironment.self, forKey: .environment) ?? .production
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(phase, forKey: .phase)
        try container.encode(Self.milliseconds(from), forKey: .from)
        try container.encodeIfPresent(to.map(Self.milliseconds), forKey: .to)
        if !productId.isEmpty { try container.encode(productId, forKey: .productId) }
        if !offerId.isEmpty { try container.encode(offerId, forKey: .offerId) }
        if !storefront.isEmpty { try container.encode(storefront, forKey: .storefront) }
        if !currency.isEmpty { try container.encode(currency, forKey: .currency) }
        try container.encodeIfPresent(monthly, forKey: .monthly)
        if environment != .production { try container.encode(environment, forKey: .environment) }
    }

    /// Milliseconds since 1970, saturating: a piece's dates come from Apple's.
    static func milliseconds(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        return value >= 9.2e18 ? Int64.max : value <= -9.2e18 ? Int64.min : Int64(value)
    }
}

/// How a change moved a customer's running totals: the pieces it took away and those it
/// added (pieces both sides have are left out). Summed over every change, the deltas give
/// the pieces of every customer as they stand, whatever order Apple's news came in.
public struct ReportDelta: Sendable, Hashable, Codable {
    public var removed: [ReportPiece]
    public var added: [ReportPiece]

    public init(removed: [ReportPiece], added: [ReportPiece]) {
        self.removed = removed
        self.added = added
    }

    enum CodingKeys: String, CodingKey { case removed = "r", added = "a" }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        removed = try container.decodeIfPresent([ReportPiece].self, forKey: .removed) ?? []
        added = try container.decodeIfPresent([ReportPiece].self, forKey: .added) ?? []
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        if !removed.isEmpty { try container.encode(removed, forKey: .removed) }
        if !added.isEmpty { try container.encode(added, forKey: .added) }
    }

    /// What changed between two sets of pieces (as multisets); `nil` when nothing did.
    public static func between(_ before: [ReportPiece], _ after: [ReportPiece]) -> ReportDelta? {
        var counts: [ReportPiece: Int] = [:]
        for piece in before { counts[piece, default: 0] -= 1 }
        for piece in after { counts[piece, default: 0] += 1 }
        var delta = ReportDelta(removed: [], added: [])
        for (piece, count) in counts.sorted(by: { ($0.key.phase.rawValue, $0.key.from) < ($1.key.phase.rawValue, $1.key.from) }) {
            if count < 0 { delta.removed += Array(repeating: piece, count: -count) }
            if count > 0 { delta.added += Array(repeating: piece, count: count) }
        }
        return delta.removed.isEmpty && delta.added.isEmpty ? nil : delta
    }
}
