import Crypto
import Entitlements
import Foundation

/// Apple's way to bind a purchase to an account: the app passes a UUID (`appAccountToken`)
/// when it buys, and Apple puts it in the signed transaction. When the publisher says how a
/// customer's UUID is made, a purchase carrying another customer's UUID is never theirs,
/// whatever the transfer policy.
package enum AppAccountToken {
    /// The UUID (lowercase) a customer's purchases carry, when the publisher says how it is
    /// made: the customer id itself (`customerIdentity: appAccountToken`), or UUIDv5 of the
    /// customer id in the publisher's `appAccountTokenNamespace`. `nil`: not known.
    package static func expected(for customer: String, publisher: Publisher) -> String? {
        if publisher.customerIdentity == .appAccountToken { return UUID(uuidString: customer)?.uuidString.lowercased() }
        guard let namespace = publisher.appAccountTokenNamespace.flatMap(UUID.init(uuidString:)) else { return nil }
        return uuid5(namespace: namespace, name: customer).uuidString.lowercased()
    }

    /// Whether a purchase carrying `token` may belong to `customer` (true when either is unknown).
    package static func allows(_ token: String?, for customer: String, publisher: Publisher) -> Bool {
        matches(token, customer: customer, publisher: publisher) ?? true
    }

    /// Whether a purchase carrying `token` was bought for `customer`: `nil` when it carries
    /// none or the publisher does not say how a customer's token is made.
    package static func matches(_ token: String?, customer: String, publisher: Publisher) -> Bool? {
        guard let token, let expected = expected(for: customer, publisher: publisher) else { return nil }
        return token.lowercased() == expected
    }

    /// The token each purchase (original transaction) is bound to now: that of its newest
    /// transaction carrying one. Apple's Set App Account Token sets or resets it from one
    /// transaction on, so an older transaction's token no longer binds the purchase.
    package static func current(_ facts: some Sequence<PurchaseFact>) -> [String: String] {
        binding(facts).compactMapValues(\.appAccountToken)
    }

    /// `current`, with the view each token comes from (its `signedDate` says as of when).
    package static func binding(_ facts: some Sequence<PurchaseFact>) -> [String: PurchaseFact] {
        var newest: [String: PurchaseFact] = [:]
        for fact in facts where fact.appAccountToken != nil {
            if let known = newest[fact.originalTransactionId],
                (known.purchaseDate, known.signedDate ?? .distantPast) >= (fact.purchaseDate, fact.signedDate ?? .distantPast)
            {
                continue
            }
            newest[fact.originalTransactionId] = fact
        }
        return newest
    }

    /// RFC 9562 UUID version 5: SHA-1 of the namespace's bytes and the name's UTF-8, as
    /// Python's `uuid.uuid5(namespace, name)` makes it.
    package static func uuid5(namespace: UUID, name: String) -> UUID {
        var input = withUnsafeBytes(of: namespace.uuid) { Array($0) }
        input.append(contentsOf: Array(name.utf8))
        var bytes = Array(Insecure.SHA1.hash(data: input).prefix(16))
        bytes[6] = bytes[6] & 0x0F | 0x50
        bytes[8] = bytes[8] & 0x3F | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}
