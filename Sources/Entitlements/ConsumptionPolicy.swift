/// How a publisher answers Apple's `CONSUMPTION_REQUEST` (a customer asked Apple for a
/// refund; Apple asks what the developer knows, for 12 hours). Apple's rule: answer only
/// when the customer consented to sharing the information.
public struct ConsumptionPolicy: Sendable, Hashable, Codable {
    /// Where the customer's consent comes from.
    public enum Consent: String, Sendable, Hashable, Codable {
        /// The publisher's terms, accepted by every customer, carry it.
        case terms
        /// Each customer's own answer, which the publisher's backend records
        /// (`PUT /v1/customers/{id}/consumption-consent`); no answer is no consent.
        case perCustomer
    }

    /// Answer at all (false: nothing is ever sent).
    public var answer: Bool
    public var consent: Consent
    /// The offers whose purchases are answered; every offer when absent.
    public var offers: [String]?
    /// `DECLINE`, `GRANT_FULL` or `GRANT_PRORATED` (Apple's `refundPreference`); none when absent.
    public var refundPreference: Preference?
    /// Whether the app offers free samples or trials of what was bought.
    public var sampleContentProvided: Bool

    /// Apple's refund preferences, by their names on the wire.
    public enum Preference: String, Sendable, Hashable, Codable {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }

    public init(
        answer: Bool = true, consent: Consent = .perCustomer, offers: [String]? = nil, refundPreference: Preference? = nil,
        sampleContentProvided: Bool = false
    ) {
        self.answer = answer
        self.consent = consent
        self.offers = offers
        self.refundPreference = refundPreference
        self.sampleContentProvided = sampleContentProvided
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        answer = try container.decodeIfPresent(Bool.self, forKey: .answer) ?? true
        consent = try container.decodeIfPresent(Consent.self, forKey: .consent) ?? .perCustomer
        offers = try container.decodeIfPresent([String].self, forKey: .offers)
        refundPreference = try container.decodeIfPresent(Preference.self, forKey: .refundPreference)
        sampleContentProvided = try container.decodeIfPresent(Bool.self, forKey: .sampleContentProvided) ?? false
    }

    /// Whether purchases of `offerId` are answered.
    public func answers(offerId: String?) -> Bool {
        guard answer else { return false }
        guard let offers else { return true }
        return offerId.map(offers.contains) ?? false
    }
}
