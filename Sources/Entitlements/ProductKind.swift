/// The four kinds of App Store product, which decide how a purchase becomes access.
public enum ProductKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// Credited to the customer's ledger, once per transaction ("add calling credit").
    case consumable = "Consumable"
    /// Access for ever (a magazine issue).
    case nonConsumable = "Non-Consumable"
    /// Access for the offer's fixed number of days.
    case nonRenewing = "Non-Renewing Subscription"
    /// Access until the subscription's expiry, kept true by renewals and notifications.
    case autoRenewable = "Auto-Renewable Subscription"
}
