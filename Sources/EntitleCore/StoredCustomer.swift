import Deflate
import Entitlements
import Foundation

/// The customer's document as the customer's record holds it (`Record`, the hash's `doc`,
/// after the version, event ids and fences; alone in the older layout): the JSON of
/// `CustomerEntitlements`, deflated (zlib's format, with its checksum) with a dictionary of
/// what customers' documents say, in base64 after the marker `z1:`.
///
/// Every fact is kept (nothing is summarized or dropped, so "entitled on date D" reads the
/// same for every D); deflate shares what repeats: a renewal's transaction and access period
/// are mostly the previous renewal's, so each one adds little. A document written before
/// (plain JSON, starting `{`) is read as it is and written in this form at its next change;
/// `Format.json` still writes plain JSON, for a rolling upgrade from a version that reads
/// only that (docs/operations.md, "Upgrading").
///
/// The dictionary is part of the format (a test pins it): changing it means a new marker,
/// and reading both.
package enum StoredCustomer {
    static let marker = "z1:"

    /// How documents are written; both are always read.
    package enum Format: String, Sendable, CaseIterable {
        /// Deflated (`z1:`), the default.
        case deflated
        /// Plain JSON, as versions before the deflated form wrote and read.
        case json
    }

    /// Deflate's level: zlib's default.
    static let level: Int32 = 6

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    /// The document to store. Deflated, it leaves out the publisher and the customer: the
    /// key names both, and a customer's id is the one thing in a first purchase's document
    /// that nothing else repeats.
    package static func encode(_ state: CustomerEntitlements, format: Format = .deflated) throws -> String {
        if format == .json { return String(decoding: try encoder.encode(state), as: UTF8.self) }
        var anonymous = state
        (anonymous.publisher, anonymous.customer) = ("", "")
        let deflated = try Deflate.compress(Array(try encoder.encode(anonymous)), dictionary: dictionary, level: level)
        return marker + Data(deflated).base64EncodedString()
    }

    /// A stored document read back, in either form, as the document of the customer its key
    /// names.
    package static func decode(_ stored: String, publisher: String, customer: String) throws -> CustomerEntitlements {
        var state = try JSONDecoder().decode(CustomerEntitlements.self, from: json(stored))
        (state.publisher, state.customer) = (publisher, customer)
        return state
    }

    /// The JSON text of a stored document, in either form.
    package static func json(_ stored: String) throws -> Data {
        if stored.hasPrefix("{") { return Data(stored.utf8) }
        guard stored.hasPrefix(marker) else {
            throw Deflate.Failure(description: "the stored document is in no form this version reads (\(stored.prefix(3)))")
        }
        guard let deflated = Data(base64Encoded: String(stored.dropFirst(marker.count))) else {
            throw Deflate.Failure(description: "the stored document is not base64 after its marker")
        }
        return Data(try Deflate.decompress(Array(deflated), dictionary: dictionary))
    }

    /// What documents say most, the likeliest last (deflate reaches the end of its window
    /// with the shortest distances): the keys of `CustomerEntitlements` and what it holds, the
    /// values that recur, and last a first subscription's document without its ids, dates and
    /// names (a publisher's own product ids are not guessed: "com." at most).
    static let dictionary: [UInt8] = Array(dictionaryText.utf8)
    package static let dictionaryText = """
        "billingRetries":[{"from":,"originalTransactionId":"","to":,"transactionId":""}],"heldSince":{"":},"provisional":{"":},\
        "sharedPurchases":[""],"billingPlan":{"commitmentExpiresDate":,"commitmentPrice":"","commitmentRenewalBillingPlanType":"",\
        "commitmentRenewalDate":,"commitmentRenewalPrice":"","commitmentRenewalProductId":"","commitmentRenews":false,"currency":"",\
        "monthlyPrice":"","period":1,"periods":12,"renewalBillingPlanType":"","type":""},"expiresBeforeExtension":,\
        "revocationDate":,"revocationPercentage":,"revocationType":"REFUND_FULL","previousOriginalTransactionId":"",\
        "appAccountToken":"","offerIdentifier":"","offerDiscountType":"PAY_AS_YOU_GO","offerKind":"promotional",\
        "expirationReason":"customerCancelled","gracePeriodExpiresDate":,"priceIncreaseConsented":false,"provisionalUntil":,\
        "endReason":"expired","endedAt":,"releasedAt":,"status":"expired","Sandbox","price":"9.99",\
        "kind":"Non-Consumable","kind":"Consumable","priceSource":"reported","kind":"purchase","kind":"spend",\
        {"credits":{"entries":[{"amount":100,"at":,"currency":"USD","kind":"purchase","offerId":"","price":"0.99","transactionId":""}]},\
        "customer":"","periods":[{"end":,"entitlements":["",""],"offerId":"","originalTransactionId":"","productId":"com.",\
        "start":,"transactionId":""}],"publisher":"","subscriptions":{"":{"asOf":,"autoRenew":true,"autoRenewProductId":"com.",\
        "expiresDate":,"isInBillingRetry":false,"isIntroductoryOffer":true,"latestTransactionId":"","offerId":"",\
        "originalTransactionId":"","productId":"com.","status":"active"}},"transactions":{"":{"bundleId":"com.","currency":"USD",\
        "environment":"Production","expiresDate":,"isFamilyShared":false,"isIntroductoryOffer":true,"isUpgraded":false,\
        "kind":"Auto-Renewable Subscription","offerDiscountType":"FREE_TRIAL","offerKind":"introductory",\
        "originalTransactionId":"","price":"0","priceSource":"apple","productId":"com.","purchaseDate":,"quantity":1,\
        "signedDate":,"storefront":"USA","transactionId":""}}}
        """
}
