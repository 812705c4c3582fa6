import Foundation

/// Until when a customer's history gives each entitlement and each offer: the latest end of
/// the periods that give it (a provisional grant ends at its provisional end; `nil` for
/// never). What the holder indexes keep, so an audience ("everyone entitled to `hd` now") is
/// found without reading every customer. An end in the past means the customer had it once.
public struct AccessEnds: Sendable, Hashable {
    public var entitlements: [String: Date?] = [:]
    public var offers: [String: Date?] = [:]

    public init(_ customer: CustomerEntitlements) {
        for period in customer.periods {
            let end = customer.accessEnd(of: period)
            for entitlement in period.entitlements { entitlements[entitlement] = Self.later(entitlements[entitlement], end) }
            offers[period.offerId] = Self.later(offers[period.offerId], end)
        }
    }

    /// The later of two ends, `nil` (never) being the latest; an absent one is no end.
    static func later(_ known: Date??, _ end: Date?) -> Date? {
        guard let known else { return end }
        guard let known, let end else { return nil }
        return max(known, end)
    }
}
