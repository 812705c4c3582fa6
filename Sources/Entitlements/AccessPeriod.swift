import Foundation

/// A span during which one transaction gave a customer an offer's entitlements. History is
/// kept, never rewritten away: "was this customer entitled on date D" is answered from it.
///
/// A customer holds a transaction's access in one or more stints: a purchase transferred
/// away and back gives the customer a new period for the same transaction, starting when it
/// came back, while the old one keeps its end.
public struct AccessPeriod: Sendable, Hashable, Codable {
    /// Why a period ended before its natural end.
    public enum EndReason: String, Sendable, Hashable, Codable {
        /// `transferred` is no longer written (a transfer sets `releasedAt`); documents
        /// written before still carry it, and it is read as a release.
        case refunded, revoked, transferred, superseded
        /// Apple said the subscription had expired before the expiry known (verifyReceipt 21006).
        case expired
    }

    public var transactionId: String
    public var originalTransactionId: String
    public var offerId: String
    public var productId: String
    public var entitlements: [String]
    public var start: Date
    /// The natural end (expiry, grace end, fixed term); `nil` for ever.
    public var end: Date?
    /// An early end Apple decided: refund, revocation, or an upgrade replacing it. A
    /// reversed refund clears it.
    public var endedAt: Date?
    public var endReason: EndReason?
    /// When the customer stopped holding the purchase (it was transferred to another
    /// customer). Kept apart from `endedAt`, so a refund reversed after a transfer does not
    /// give the previous holder access again.
    public var releasedAt: Date?

    public init(
        transactionId: String, originalTransactionId: String, offerId: String, productId: String, entitlements: [String], start: Date,
        end: Date?
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.offerId = offerId
        self.productId = productId
        self.entitlements = entitlements
        self.start = start
        self.end = end
    }

    /// When the customer stopped holding this period's purchase, from either way of recording it.
    public var released: Date? { releasedAt ?? (endReason == .transferred ? endedAt : nil) }

    /// When access from this period stops (exclusive); `nil` for never.
    public var effectiveEnd: Date? {
        [end, endReason == .transferred ? nil : endedAt, released].compactMap { $0 }.min()
    }

    public func covers(_ date: Date) -> Bool {
        start <= date && effectiveEnd.map { date < $0 } ?? true
    }

    /// Ends the period early at `date` (never later than an earlier early end).
    mutating func endEarly(at date: Date, because reason: EndReason) {
        if endReason == .transferred {
            // An older document's release: keep it as one before recording Apple's end.
            releasedAt = released
            endedAt = nil
            endReason = nil
        }
        if let endedAt, endedAt <= date { return }
        endedAt = max(date, start)
        endReason = reason
    }

    /// Records that the customer let the purchase go at `date` (never later than an earlier release).
    mutating func release(at date: Date) {
        if let released, released <= date { return }
        releasedAt = max(date, start)
    }
}
