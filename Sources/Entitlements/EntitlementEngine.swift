import Foundation

/// The rules that turn verified App Store facts into a customer's access, for one
/// publisher. Pure: it changes the `CustomerEntitlements` it is given and says what it
/// decided; applying the same facts twice changes nothing the second time.
public struct EntitlementEngine: Sendable {
    public let publisher: Publisher

    public init(publisher: Publisher) {
        self.publisher = publisher
    }

    /// Applies one transaction (and, for subscriptions, the renewal info that came with it).
    ///
    /// A newer view of a transaction without the revocation an older view had is a reversed
    /// refund: the access and credits it took back are restored. `accessFrom` starts the
    /// customer's access no earlier than that date (a purchase transferred to them).
    public func apply(
        _ fact: PurchaseFact, renewal: RenewalFact? = nil, to state: inout CustomerEntitlements, now: Date,
        accessFrom: Date? = nil
    )
        -> EntitlementDecision
    {
        guard let app = publisher.app(bundleId: fact.bundleId) else {
            return .refused(.wrongBundle, state: state, now: now)
        }
        guard app.environments.contains(fact.environment) else {
            return .refused(.wrongEnvironment, state: state, now: now)
        }
        guard let offer = publisher.offer(forProduct: fact.productId) else {
            return .refused(.unknownProduct, state: state, now: now)
        }
        let before = state
        // A newer view of a transaction replaces an older one, never the reverse.
        let stored = state.transactions[fact.transactionId]?.signedDate
        let isOlderView = stored.flatMap { old in fact.signedDate.map { old > $0 } } ?? false
        let wasRevoked = state.transactions[fact.transactionId]?.revocationDate != nil
        if !isOlderView { state.transactions[fact.transactionId] = fact }
        let current = state.transactions[fact.transactionId] ?? fact
        if wasRevoked, current.revocationDate == nil { reinstate(current, in: &state) }

        var creditsAdded = 0
        switch current.kind {
        case .consumable:
            creditsAdded = state.credits.credit(
                (offer.credits ?? 0) * max(1, current.quantity), transactionId: current.transactionId, offerId: offer.offerId,
                at: current.purchaseDate)
            if !offer.entitlements.isEmpty { record(current, offer: offer, end: current.purchaseDate, from: accessFrom, in: &state) }
        case .nonConsumable:
            record(current, offer: offer, end: nil, from: accessFrom, in: &state)
        case .nonRenewing:
            let days = Double(offer.accessDays ?? 0) * 86_400
            record(current, offer: offer, end: current.purchaseDate.addingTimeInterval(days), from: accessFrom, in: &state)
        case .autoRenewable:
            applySubscription(current, renewal: renewal, offer: offer, to: &state, now: now, from: accessFrom)
        }
        if let revoked = current.revocationDate {
            endTransaction(current, at: revoked, reason: current.isFamilyShared ? .revoked : .refunded, in: &state)
        }

        let subscription = current.kind == .autoRenewable ? state.subscriptions[current.originalTransactionId] : nil
        var decision = EntitlementDecision(
            accessGranted: true, offerId: offer.offerId, entitlements: state.entitlements(at: now), subscription: subscription,
            reason: nil, creditsAdded: creditsAdded, creditBalance: state.credits.balance, changed: state != before)
        if current.revocationDate != nil {
            decision.accessGranted = false
            decision.reason = .revoked
        } else if current.kind == .autoRenewable {
            decision.accessGranted = subscription?.status.grantsAccess ?? false
            decision.reason = decision.accessGranted ? nil : (subscription?.status == .revoked ? .revoked : .expired)
        } else if current.kind == .nonRenewing, !(state.periods.first { $0.transactionId == current.transactionId }?.covers(now) ?? false) {
            decision.accessGranted = false
            decision.reason = .expired
        }
        return decision
    }

    /// A refund or revocation Apple reported (a notification, a renewal check): the
    /// transaction's access ends at `date`, a consumable's credits are clawed back.
    public func refund(
        transactionId: String, at date: Date, familyRevocation: Bool = false, in state: inout CustomerEntitlements
    )
        -> EntitlementDecision
    {
        guard var fact = state.transactions[transactionId] else {
            return .refused(.invalidReceipt, state: state, now: date)
        }
        let before = state
        fact.revocationDate = fact.revocationDate ?? date
        state.transactions[transactionId] = fact
        endTransaction(fact, at: fact.revocationDate ?? date, reason: familyRevocation ? .revoked : .refunded, in: &state)
        return EntitlementDecision(
            accessGranted: false, offerId: publisher.offer(forProduct: fact.productId)?.offerId, entitlements: state.entitlements(at: date),
            subscription: state.subscriptions[fact.originalTransactionId], reason: .revoked, creditsAdded: 0,
            creditBalance: state.credits.balance, changed: state != before)
    }

    /// Whether a purchase another customer holds goes to `claimant`, per the publisher's policy.
    public func resolveOwnership(claimant: String, currentOwner: String?) -> TransferPolicy? {
        guard let currentOwner, currentOwner != claimant else { return nil }
        return publisher.transferPolicy
    }

    // MARK: Rules

    private func record(_ fact: PurchaseFact, offer: Offer, end: Date?, from: Date?, in state: inout CustomerEntitlements) {
        var period = AccessPeriod(
            transactionId: fact.transactionId, originalTransactionId: fact.originalTransactionId, offerId: offer.offerId,
            productId: fact.productId, entitlements: offer.entitlements, start: max(fact.purchaseDate, from ?? .distantPast), end: end)
        if let index = state.periods.firstIndex(where: { $0.transactionId == fact.transactionId }) {
            // Keep an early end already recorded (a refund applied before this view arrived),
            // and a later start (the purchase came to this customer by a transfer).
            period.endedAt = state.periods[index].endedAt
            period.endReason = state.periods[index].endReason
            period.start = max(period.start, state.periods[index].start)
            state.periods[index] = period
        } else {
            state.periods.append(period)
        }
    }

    private func applySubscription(
        _ fact: PurchaseFact, renewal newRenewal: RenewalFact?, offer: Offer, to state: inout CustomerEntitlements, now: Date, from: Date?
    ) {
        // Renewal info older than what was applied says nothing new (notifications arrive out of order).
        let asOf = state.subscriptions[fact.originalTransactionId]?.asOf
        let renewal = newRenewal.flatMap { renewal in
            (asOf.flatMap { asOf in renewal.signedDate.map { $0 < asOf } } ?? false) ? nil : renewal
        }
        let inGrace = renewal.map { $0.isInBillingRetry && ($0.gracePeriodExpiresDate.map { $0 > now } ?? false) } ?? false
        let expires = fact.expiresDate ?? fact.purchaseDate
        let end = inGrace ? max(expires, renewal?.gracePeriodExpiresDate ?? expires) : expires
        record(fact, offer: offer, end: end, from: from, in: &state)
        // A newer transaction of the same subscription (an upgrade, an early renewal)
        // replaces the older ones from its start.
        for index in state.periods.indices
        where state.periods[index].originalTransactionId == fact.originalTransactionId
            && state.periods[index].transactionId != fact.transactionId && state.periods[index].start < fact.purchaseDate
            && (state.periods[index].effectiveEnd.map { $0 > fact.purchaseDate } ?? true)
            && state.transactions[state.periods[index].transactionId]?.productId != fact.productId
        {
            state.periods[index].endEarly(at: fact.purchaseDate, because: .superseded)
        }

        let existing = state.subscriptions[fact.originalTransactionId]
        if let existing, let latest = state.transactions[existing.latestTransactionId], latest.purchaseDate > fact.purchaseDate {
            // An older transaction: it adds history, not the subscription's current state.
            if let renewal { applyRenewal(renewal, to: &state, now: now) }
            return
        }
        let status: SubscriptionRecord.Status
        if fact.revocationDate != nil {
            status = .revoked
        } else if expires > now {
            status = .active
        } else if inGrace {
            status = .gracePeriod
        } else if renewal?.isInBillingRetry == true {
            status = .billingRetry
        } else {
            status = .expired
        }
        state.subscriptions[fact.originalTransactionId] = SubscriptionRecord(
            originalTransactionId: fact.originalTransactionId, offerId: offer.offerId, productId: fact.productId, status: status,
            expiresDate: fact.expiresDate, gracePeriodExpiresDate: inGrace ? renewal?.gracePeriodExpiresDate : nil,
            autoRenew: renewal?.autoRenew ?? existing?.autoRenew,
            autoRenewProductId: renewal?.autoRenewProductId ?? existing?.autoRenewProductId,
            latestTransactionId: fact.transactionId, isIntroductoryOffer: fact.isIntroductoryOffer, offerIdentifier: fact.offerIdentifier,
            asOf: [fact.signedDate, renewal?.signedDate, existing?.asOf].compactMap { $0 }.max())
    }

    private func applyRenewal(_ renewal: RenewalFact, to state: inout CustomerEntitlements, now: Date) {
        guard var record = state.subscriptions[renewal.originalTransactionId] else { return }
        if let asOf = record.asOf, let signed = renewal.signedDate, signed < asOf { return }
        record.autoRenew = renewal.autoRenew
        record.autoRenewProductId = renewal.autoRenewProductId
        record.asOf = renewal.signedDate ?? record.asOf
        state.subscriptions[renewal.originalTransactionId] = record
    }

    /// Undoes what a refund or revocation took (Apple reversed it).
    private func reinstate(_ fact: PurchaseFact, in state: inout CustomerEntitlements) {
        for index in state.periods.indices
        where state.periods[index].transactionId == fact.transactionId
            && (state.periods[index].endReason == .refunded || state.periods[index].endReason == .revoked)
        {
            state.periods[index].endedAt = nil
            state.periods[index].endReason = nil
        }
        if fact.kind == .consumable { state.credits.reinstate(transactionId: fact.transactionId, at: fact.signedDate ?? fact.purchaseDate) }
        if var subscription = state.subscriptions[fact.originalTransactionId], subscription.latestTransactionId == fact.transactionId,
            subscription.status == .revoked
        {
            // Recomputed from the transaction by the subscription rules that follow.
            subscription.status = .expired
            state.subscriptions[fact.originalTransactionId] = subscription
        }
    }

    private func endTransaction(_ fact: PurchaseFact, at date: Date, reason: AccessPeriod.EndReason, in state: inout CustomerEntitlements) {
        for index in state.periods.indices where state.periods[index].transactionId == fact.transactionId {
            state.periods[index].endEarly(at: date, because: reason)
        }
        if fact.kind == .consumable { state.credits.clawBack(transactionId: fact.transactionId, at: date) }
        if var subscription = state.subscriptions[fact.originalTransactionId], subscription.latestTransactionId == fact.transactionId {
            subscription.status = .revoked
            state.subscriptions[fact.originalTransactionId] = subscription
        }
    }
}
