import Foundation

/// A span during which one transaction gave a customer an offer's entitlements. History is
/// kept, never rewritten away: "was this customer entitled on date D" is answered from it.
public struct AccessPeriod: Sendable, Hashable, Codable {
    /// Why a period ended before its natural end.
    public enum EndReason: String, Sendable, Hashable, Codable {
        case refunded, revoked, transferred, superseded
    }

    public var transactionId: String
    public var originalTransactionId: String
    public var offerId: String
    public var productId: String
    public var entitlements: [String]
    public var start: Date
    /// The natural end (expiry, grace end, fixed term); `nil` for ever.
    public var end: Date?
    /// An early end: refund, revocation, transfer, or an upgrade replacing it.
    public var endedAt: Date?
    public var endReason: EndReason?

    /// When access from this period stops (exclusive); `nil` for never.
    public var effectiveEnd: Date? {
        switch (end, endedAt) {
        case (let end?, let ended?): min(end, ended)
        case (let end?, nil): end
        case (nil, let ended?): ended
        case (nil, nil): nil
        }
    }

    public func covers(_ date: Date) -> Bool {
        start <= date && effectiveEnd.map { date < $0 } ?? true
    }

    /// Ends the period early at `date` (never later than an earlier early end).
    mutating func endEarly(at date: Date, because reason: EndReason) {
        if let endedAt, endedAt <= date { return }
        endedAt = max(date, start)
        endReason = reason
    }
}
