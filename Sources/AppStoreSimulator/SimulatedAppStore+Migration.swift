import AppStore
import Foundation

extension SimulatedAppStore {
    /// The publisher migrated a subscription (Apple's Migrate a Subscription to Advanced
    /// Commerce API): it continues under a new original transaction id whose first
    /// transaction carries `previousOriginalTransactionId`, from now to the end of the period
    /// already paid for (nothing is billed), and Apple sends `MIGRATION`. The old chain ends
    /// (expired, auto-renew off; its last transaction keeps its expiry): nothing renews twice.
    public func migrate(_ originalTransactionId: String) async throws -> SubscriptionSnapshot {
        try await processDue()
        var old = try subscription(originalTransactionId)
        guard old.state == .active, let latest = transactions[old.latestTransactionId], !latest.isRevoked else {
            throw SimulatorError(.conflict, "only an active subscription migrates")
        }
        let now = clock.now
        var moved = old
        moved.originalTransactionId = newTransactionId()
        moved.originalPurchaseDate = now
        moved.recentStartDate = now
        moved.renewals = 0
        var transaction = latest.transaction
        transaction.transactionId = moved.originalTransactionId
        transaction.originalTransactionId = moved.originalTransactionId
        transaction.previousOriginalTransactionId = originalTransactionId
        transaction.purchaseDate = AppleTimestamp(now)
        transaction.originalPurchaseDate = AppleTimestamp(now)
        transaction.webOrderLineItemId = newWebOrderLineItemId()
        transaction.transactionReason = .purchase
        transaction.price = 0
        (transaction.offerType, transaction.offerIdentifier, transaction.offerDiscountType, transaction.offerPeriod) = (nil, nil, nil, nil)
        let record = SimulatedTransaction(transaction: transaction, account: old.account, orderId: Self.newOrderId())
        moved.transactionIds = [record.id]
        store(record)
        save(moved)
        old.autoRenew = false
        old.state = .expired
        old.expirationIntent = .other
        save(old)
        let uuid = try await notify(.migration, nil, v1: nil, transactionId: record.id)
        return try snapshot(moved.originalTransactionId, notifications: [uuid])
    }
}
