import Foundation

/// `GET /v1/customers/{id}/access/{offerId}`: `expiresAt` ISO 8601, `null` for ever or no access.
struct OfferAccessReply: Encodable {
    var customer: String
    var offerId: String
    var accessGranted: Bool
    var expiresAt: String?

    private enum CodingKeys: String, CodingKey { case customer, offerId, accessGranted, expiresAt }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(customer, forKey: .customer)
        try container.encode(offerId, forKey: .offerId)
        try container.encode(accessGranted, forKey: .accessGranted)
        try container.encode(expiresAt, forKey: .expiresAt)
    }
}

/// Cleeng's access item (getAccessStatus, and each item of Get Entitlements): `grantType`
/// and `expiresAt` (Unix seconds) are written as `null` when they do not apply, as Cleeng does.
struct CleengAccessItem: Encodable {
    var customerEmail: String?
    var offerId: String
    var accessGranted: Bool
    var expiresAt: Date?

    private enum CodingKeys: String, CodingKey { case customerEmail, offerId, accessGranted, grantType, expiresAt }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(customerEmail, forKey: .customerEmail)
        try container.encode(offerId, forKey: .offerId)
        try container.encode(accessGranted, forKey: .accessGranted)
        try container.encode(accessGranted ? "purchase" : nil, forKey: .grantType)
        try container.encode(Self.unixSeconds(expiresAt), forKey: .expiresAt)
    }

    /// Whole seconds; `nil` for no date or one no client could read.
    static func unixSeconds(_ date: Date?) -> Int64? {
        guard let date, date.timeIntervalSince1970.isFinite, abs(date.timeIntervalSince1970) < 1e12 else { return nil }
        return Int64(date.timeIntervalSince1970.rounded(.down))
    }
}

/// Cleeng's Get Entitlements: one item per offer the customer has held.
struct CleengEntitlementsReply: Encodable {
    var customerEmail: String
    var items: [CleengAccessItem]
}

/// Cleeng's getAccessibleTags: the entitlements the customer holds now.
struct CleengTagsReply: Encodable {
    var customerEmail: String
    var tags: [String]
}
