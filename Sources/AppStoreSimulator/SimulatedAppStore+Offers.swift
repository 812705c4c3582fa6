import AppStore
import Foundation

/// Notifications about offers and extensions for many subscribers: `OFFER_REDEEMED` (a
/// customer with an active subscription redeemed a promotional offer or an offer code:
/// `UPGRADE` takes effect at once, `DOWNGRADE` at renewal, none for the current product) and
/// the mass renewal-date extension (Apple's "for all active subscribers": each extended
/// subscription's `RENEWAL_EXTENDED`, then one `RENEWAL_EXTENSION` / `SUMMARY` with counts).
extension SimulatedAppStore {
    /// `OFFER_REDEEMED` for an active subscription, its latest transaction and renewal info.
    public func redeemOffer(_ originalTransactionId: String, subtype: NotificationSubtype?) async throws -> SubscriptionSnapshot {
        try await processDue()
        let subscription = try subscription(originalTransactionId)
        guard subscription.state == .active else {
            throw SimulatorError(.conflict, "Apple sends OFFER_REDEEMED for an active subscription only (an inactive one: SUBSCRIBED)")
        }
        guard subtype == nil || subtype == .upgrade || subtype == .downgrade else {
            throw SimulatorError(.invalidRequest, "OFFER_REDEEMED's subtype is UPGRADE, DOWNGRADE or none")
        }
        let uuid = try await notify(.offerRedeemed, subtype, v1: nil, transactionId: subscription.latestTransactionId)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// The Advanced Commerce API's notifications about a subscription the developer changed
    /// through it (`METADATA_UPDATE`: Change Subscription Metadata; `PRICE_CHANGE`: Change
    /// Subscription Price), with its latest transaction and renewal info. The simulator does
    /// not model the Advanced Commerce API's endpoints: this sends what Apple would after them.
    public func advancedCommerceChange(_ originalTransactionId: String, _ type: NotificationType) async throws -> SubscriptionSnapshot {
        try await processDue()
        let subscription = try subscription(originalTransactionId)
        let uuid = try await notify(type, nil, v1: nil, transactionId: subscription.latestTransactionId)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// Extends every active subscription of `productId` in the app and environment by `days`
    /// (Apple's Extend Subscription Renewal Dates for All Active Subscribers), then sends the
    /// summary. Returns the notifications' UUIDs, the summary's last.
    public func extendAll(
        productId: String, bundleId: String, environment: AppStoreEnvironment, days: Int, reasonCode: Int, requestIdentifier: String
    ) async throws -> [String] {
        try await processDue()
        guard (1...90).contains(days) else { throw SimulatorError(.invalidRequest, "extendByDays must be 1 to 90") }
        let eligible = subscriptions.values.filter { $0.productId == productId && $0.bundleId == bundleId && $0.environment == environment }
            .sorted { $0.originalTransactionId < $1.originalTransactionId }
        var notifications: [String] = []
        var succeeded: Int64 = 0
        for subscription in eligible where subscription.state == .active {
            let extended = try await extendRenewalDate(
                subscription.originalTransactionId, days: days, reasonCode: reasonCode, requestIdentifier: requestIdentifier)
            notifications += extended.snapshot.notifications
            succeeded += 1
        }
        let app = catalog.app(bundleId)
        var summary = AppStore.NotificationSummary()
        summary.environment = environment
        summary.appAppleId = app?.appAppleId
        summary.bundleId = bundleId
        summary.productId = productId
        summary.requestIdentifier = requestIdentifier
        summary.storefrontCountryCodes = []
        summary.succeededCount = succeeded
        summary.failedCount = 0
        var payload = NotificationPayload()
        payload.notificationType = .renewalExtension
        payload.subtype = .summary
        payload.summary = summary
        let uuid = UUID().uuidString.lowercased()
        payload.notificationUUID = uuid
        payload.version = "2.0"
        payload.signedDate = AppleTimestamp(clock.now)
        await self.notifications.send(
            OutgoingNotification(
                uuid: uuid, type: .renewalExtension, subtype: .summary, signedPayload: try signing.sign(payload), v1Body: nil,
                transactionId: "", bundleId: bundleId, environment: environment, createdAt: clock.now))
        return notifications + [uuid]
    }
}
