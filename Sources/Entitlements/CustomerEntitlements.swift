import Foundation

/// Everything Entitle knows about one customer of one publisher: every transaction seen,
/// the access periods they gave, the subscriptions and the credit ledger. Stored whole, so
/// each job's change to it is one write.
///
/// What the customer has at a moment (entitlements, a subscription's status) is computed
/// from these facts and that moment when asked, never stored: an answer cannot go stale.
public struct CustomerEntitlements: Sendable, Hashable, Codable {
    public var publisher: String
    public var customer: String
    public var transactions: [String: PurchaseFact] = [:]
    public var periods: [AccessPeriod] = []
    public var subscriptions: [String: SubscriptionRecord] = [:]
    public var credits = CreditLedger()
    /// For purchases that came to this customer by a transfer (keyed by original transaction
    /// id): since when the customer holds them. Their transactions give access no earlier.
    public var heldSince: [String: Date] = [:]
    /// Every stretch during which Apple was trying to bill a renewal of one of the customer's
    /// subscriptions, kept as history (reports count the days in billing retry from it).
    public var billingRetries: [BillingRetry] = []
    /// Purchases (original transaction ids) the customer has through the `share` policy, not
    /// as their holder: their events say `shared`, and reports count them with the holder.
    public var sharedPurchases: Set<String> = []
    /// Purchases (original transaction ids) whose access was granted from a transaction
    /// verified here while Apple could not be asked, and until when: access ends then unless
    /// Apple's word (any of its answers about the purchase) confirms it first.
    public var provisional: [String: Date] = [:]

    /// Apple trying to bill a subscription's renewal: from when its latest transaction's
    /// period ended to a recovery (a new transaction), Apple giving up, a refund or a transfer.
    public struct BillingRetry: Sendable, Hashable, Codable {
        public var originalTransactionId: String
        /// The transaction whose renewal failed.
        public var transactionId: String
        public var from: Date
        /// `nil` while Apple is still trying.
        public var to: Date?

        public init(originalTransactionId: String, transactionId: String, from: Date, to: Date? = nil) {
            self.originalTransactionId = originalTransactionId
            self.transactionId = transactionId
            self.from = from
            self.to = to
        }
    }

    /// The environment of the credits the customer holds when every credit purchase in its
    /// ledger was made outside production (a tester's: `Sandbox`, `Xcode`): what it spends and
    /// holds then counts with the sandbox's figures. `nil` (production) otherwise, or with no
    /// purchase.
    public var creditsEnvironment: String? {
        var environment: String?
        for entry in credits.entries where entry.kind == .purchase {
            let name = transactions[entry.transactionId]?.environment ?? ""
            if name.isEmpty || name == "Production" { return nil }
            environment = environment ?? name
        }
        return environment
    }

    /// Ends a subscription's open billing retry at `date` (no earlier than it began).
    public mutating func endBillingRetry(of originalTransactionId: String, at date: Date) {
        for index in billingRetries.indices
        where billingRetries[index].originalTransactionId == originalTransactionId && billingRetries[index].to == nil {
            billingRetries[index].to = max(billingRetries[index].from, date)
        }
    }

    public init(publisher: String, customer: String) {
        self.publisher = publisher
        self.customer = customer
    }

    enum CodingKeys: String, CodingKey {
        case publisher, customer, transactions, periods, subscriptions, credits, heldSince, billingRetries, sharedPurchases, provisional
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        publisher = try container.decode(String.self, forKey: .publisher)
        customer = try container.decode(String.self, forKey: .customer)
        transactions = try container.decodeIfPresent([String: PurchaseFact].self, forKey: .transactions) ?? [:]
        periods = try container.decodeIfPresent([AccessPeriod].self, forKey: .periods) ?? []
        subscriptions = try container.decodeIfPresent([String: SubscriptionRecord].self, forKey: .subscriptions) ?? [:]
        credits = try container.decodeIfPresent(CreditLedger.self, forKey: .credits) ?? CreditLedger()
        // Documents written before transfers back existed have none.
        heldSince = try container.decodeIfPresent([String: Date].self, forKey: .heldSince) ?? [:]
        billingRetries = try container.decodeIfPresent([BillingRetry].self, forKey: .billingRetries) ?? []
        sharedPurchases = try container.decodeIfPresent(Set<String>.self, forKey: .sharedPurchases) ?? []
        provisional = try container.decodeIfPresent([String: Date].self, forKey: .provisional) ?? [:]
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(publisher, forKey: .publisher)
        try container.encode(customer, forKey: .customer)
        try container.encode(transactions, forKey: .transactions)
        try container.encode(periods, forKey: .periods)
        try container.encode(subscriptions, forKey: .subscriptions)
        try container.encode(credits, forKey: .credits)
        // Absent reads as empty: most customers never have either, and every byte is kept per customer.
        if !heldSince.isEmpty { try container.encode(heldSince, forKey: .heldSince) }
        if !billingRetries.isEmpty { try container.encode(billingRetries, forKey: .billingRetries) }
        if !sharedPurchases.isEmpty { try container.encode(sharedPurchases.sorted(), forKey: .sharedPurchases) }
        if !provisional.isEmpty { try container.encode(provisional, forKey: .provisional) }
    }

    /// The entitlements the customer has at `date`, from history.
    public func entitlements(at date: Date) -> [String] {
        Array(Set(periods(at: date).flatMap(\.entitlements))).sorted()
    }

    /// The periods that cover `date` (which transactions paid for access then); a purchase
    /// granted provisionally gives access only until its `provisional` end.
    public func periods(at date: Date) -> [AccessPeriod] {
        periods.filter { gives($0, at: date) }
    }

    /// Whether a period gives access at `date`: it covers it, and a provisional grant of its
    /// purchase has not ended by then.
    public func gives(_ period: AccessPeriod, at date: Date) -> Bool {
        period.covers(date) && (provisional[period.originalTransactionId].map { date < $0 } ?? true)
    }

    /// When a period's access ends (`nil`: never): its own end, or its purchase's provisional
    /// end when that comes first. What every answer about access says, not the period's
    /// expiry alone.
    public func accessEnd(of period: AccessPeriod) -> Date? {
        guard let until = provisional[period.originalTransactionId] else { return period.effectiveEnd }
        return period.effectiveEnd.map { min($0, until) } ?? until
    }

    /// Ends every period a subscription or purchase gave, from `date` on: the transfer
    /// policy moved it to another customer.
    public mutating func release(originalTransactionId: String, at date: Date) {
        for index in periods.indices where periods[index].originalTransactionId == originalTransactionId {
            periods[index].release(at: date)
        }
        subscriptions[originalTransactionId] = nil
        heldSince[originalTransactionId] = nil
        provisional[originalTransactionId] = nil
        endBillingRetry(of: originalTransactionId, at: date)
    }

    /// Whether the customer holds this original transaction (owns the purchase).
    public func holds(originalTransactionId: String) -> Bool {
        periods.contains { $0.originalTransactionId == originalTransactionId && $0.released == nil }
            || credits.entries.contains { entry in transactions[entry.transactionId]?.originalTransactionId == originalTransactionId }
    }

    /// Whether the customer held the purchase at `date`: a stint of theirs had begun and not
    /// yet ended by a transfer.
    public func held(originalTransactionId: String, at date: Date) -> Bool {
        periods.contains { period in
            period.originalTransactionId == originalTransactionId && period.start <= date && (period.released.map { date < $0 } ?? true)
        }
    }

    /// The customer's auto-renewable subscriptions as they stood at `date`, each with its
    /// status then: computed from the transactions, their periods and the last renewal info,
    /// so an answer is never older than the question. A subscription the customer did not
    /// hold at `date` (bought later, transferred in later or away before) is not listed.
    public func subscriptions(at date: Date) -> [SubscriptionRecord] {
        let originals = Set(transactions.values.filter { $0.kind == .autoRenewable }.map(\.originalTransactionId))
        return originals.sorted().compactMap { subscription(originalTransactionId: $0, at: date) }
    }

    /// One subscription as it stood at `date` (see `subscriptions(at:)`).
    public func subscription(originalTransactionId original: String, at date: Date) -> SubscriptionRecord? {
        guard held(originalTransactionId: original, at: date) else { return nil }
        let known = transactions.values.filter {
            $0.originalTransactionId == original && $0.kind == .autoRenewable && $0.purchaseDate <= date
        }
        guard let latest = known.max(by: { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }) else { return nil }
        let ownPeriods = periods.filter { $0.transactionId == latest.transactionId }
        guard let offerId = ownPeriods.first?.offerId ?? subscriptions[original]?.offerId else { return nil }
        let current = subscriptions[original].flatMap { $0.latestTransactionId == latest.transactionId ? $0 : nil }
        let expires = latest.expiresDate ?? latest.purchaseDate
        // A grace period Apple granted extends the transaction's period past its expiry.
        let naturalEnd = ownPeriods.compactMap(\.end).max() ?? expires
        let graceEnd = naturalEnd > expires ? naturalEnd : nil
        let status: SubscriptionRecord.Status
        let endedByApple = ownPeriods.compactMap { $0.endReason == .expired ? $0.endedAt : nil }.min()
        let provisionalEnd = provisional[original]
        if let revoked = latest.revocationDate, revoked <= date {
            status = .revoked
        } else if let provisionalEnd, provisionalEnd <= date {
            // Granted while Apple could not be asked, and Apple has not confirmed it since.
            status = .expired
        } else if let endedByApple, endedByApple <= date {
            status = .expired
        } else if expires > date {
            status = .active
        } else if let graceEnd, graceEnd > date {
            status = .gracePeriod
        } else if current?.isInBillingRetry == true || (current?.isInBillingRetry == nil && current?.status == .billingRetry) {
            status = .billingRetry
        } else {
            status = .expired
        }
        return SubscriptionRecord(
            originalTransactionId: original, offerId: offerId, productId: latest.productId, status: status, expiresDate: latest.expiresDate,
            gracePeriodExpiresDate: graceEnd, autoRenew: current?.autoRenew, autoRenewProductId: current?.autoRenewProductId,
            latestTransactionId: latest.transactionId, isIntroductoryOffer: latest.isIntroductoryOffer,
            offerIdentifier: latest.offerIdentifier, asOf: current?.asOf, isInBillingRetry: current?.isInBillingRetry,
            previousOriginalTransactionId: known.compactMap(\.previousOriginalTransactionId).first,
            billingPlan: current?.billingPlan ?? latest.billingPlan, provisionalUntil: provisionalEnd)
    }
}
