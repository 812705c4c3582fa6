import Foundation

/// Everything Entitle knows about one customer of one publisher: every transaction seen,
/// the access periods they gave, the subscriptions and the credit ledger. Stored whole, so
/// each job's change to it is one write.
public struct CustomerEntitlements: Sendable, Hashable, Codable {
    public var publisher: String
    public var customer: String
    public var transactions: [String: PurchaseFact] = [:]
    public var periods: [AccessPeriod] = []
    public var subscriptions: [String: SubscriptionRecord] = [:]
    public var credits = CreditLedger()

    public init(publisher: String, customer: String) {
        self.publisher = publisher
        self.customer = customer
    }

    /// The entitlements the customer has at `date`, from history.
    public func entitlements(at date: Date) -> [String] {
        Array(Set(periods.filter { $0.covers(date) }.flatMap(\.entitlements))).sorted()
    }

    /// The periods that cover `date` (which transactions paid for access then).
    public func periods(at date: Date) -> [AccessPeriod] {
        periods.filter { $0.covers(date) }
    }

    /// Ends every period a subscription or purchase gave, from `date` on: the transfer
    /// policy moved it to another customer.
    public mutating func release(originalTransactionId: String, at date: Date) {
        for index in periods.indices where periods[index].originalTransactionId == originalTransactionId {
            periods[index].endEarly(at: date, because: .transferred)
        }
        subscriptions[originalTransactionId] = nil
    }

    /// Whether the customer holds this original transaction (owns the purchase).
    public func holds(originalTransactionId: String) -> Bool {
        periods.contains { $0.originalTransactionId == originalTransactionId && $0.endReason != .transferred }
            || credits.entries.contains { entry in transactions[entry.transactionId]?.originalTransactionId == originalTransactionId }
    }
}
