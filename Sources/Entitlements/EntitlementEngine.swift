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
    ///
    /// `provisionalUntil`: the fact was verified here while Apple could not be asked; the
    /// purchase gives access until then unless Apple's word comes first. Without it the fact
    /// is Apple's word, and confirms a provisional grant of the purchase.
    public func apply(
        _ fact: PurchaseFact, renewal: RenewalFact? = nil, to state: inout CustomerEntitlements, now: Date,
        accessFrom: Date? = nil, provisionalUntil: Date? = nil
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
        let original = fact.originalTransactionId
        if let provisionalUntil {
            // Verified here while Apple could not be asked: a purchase Apple confirmed before
            // (held, not provisional) keeps Apple's word; the view adds nothing to it. A grant
            // is made once: the same proof posted again does not extend it.
            if state.provisional[original] == nil, !state.holds(originalTransactionId: original) {
                state.provisional[original] = provisionalUntil
            }
        } else if state.provisional[original] != nil,
            (fact.signedDate ?? now)
                > (state.transactions.values.filter { $0.originalTransactionId == original }.compactMap(\.signedDate).max()
                    ?? .distantPast)
        {
            // Apple's word replaces a grant only when it is newer than every view the grant
            // was made on: a notification signed before (a late retry of the purchase's own)
            // does not show a refund the grant may hide; an answer Apple signs now does.
            state.provisional[original] = nil
        }
        if let accessFrom {
            // The purchase comes to this customer by a transfer: they hold it from then on.
            let original = fact.originalTransactionId
            state.heldSince[original] = max(state.heldSince[original] ?? accessFrom, accessFrom)
        }
        // A newer view of a transaction replaces an older one, never the reverse.
        let isOlderView = state.transactions[fact.transactionId].map(fact.isOlderView(than:)) ?? false
        let wasRevoked = state.transactions[fact.transactionId]?.revocationDate != nil
        if !isOlderView {
            var newer = fact
            if let known = state.transactions[fact.transactionId], let was = known.expiresDate, let later = fact.expiresDate, later > was,
                fact.revocationDate == nil
            {
                // Apple extended the renewal date: the period bought stays known (for reports).
                newer.expiresBeforeExtension = known.expiresBeforeExtension ?? was
            } else if let known = state.transactions[fact.transactionId] {
                newer.expiresBeforeExtension = newer.expiresBeforeExtension ?? known.expiresBeforeExtension
            }
            // What the view leaves unsaid (a receipt's price and storefront) an earlier one said.
            state.transactions[fact.transactionId] = state.transactions[fact.transactionId].map(newer.filled(from:)) ?? newer
        } else if let known = state.transactions[fact.transactionId] {
            // An older view still tells what the stored one leaves unsaid.
            state.transactions[fact.transactionId] = known.filled(from: fact)
        }
        let current = state.transactions[fact.transactionId] ?? fact
        if wasRevoked, current.revocationDate == nil {
            reinstate(current, in: &state)
            state.transactions[current.transactionId]?.reversedAt = current.signedDate ?? now
        }

        var creditsAdded = 0
        switch current.kind {
        case .consumable:
            // Apple sells at most 10 of an item in one purchase; the bounds (here, and on an
            // offer's credits in the catalog) keep the product far from overflowing.
            creditsAdded = state.credits.credit(
                (offer.credits ?? 0) * min(max(1, current.quantity), 1_000), transactionId: current.transactionId, offerId: offer.offerId,
                at: current.purchaseDate, price: current.price, currency: current.currency)
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
            // Clawed back whole while only a receipt or a V1 notification had told the refund:
            // brought to the share Apple's signed view tells first (the first share stands).
            if current.kind == .consumable, current.revocationType != nil, let was = before.transactions[current.transactionId],
                was.revocationDate != nil, was.revocationType == nil
            {
                state.credits.settleClawback(transactionId: current.transactionId, share: current.refundedShare)
            }
        }

        let subscription = current.kind == .autoRenewable ? state.subscriptions[current.originalTransactionId] : nil
        var decision = EntitlementDecision(
            accessGranted: true, offerId: offer.offerId, entitlements: state.entitlements(at: now), subscription: subscription,
            reason: nil, creditsAdded: creditsAdded, creditBalance: state.credits.balance, changed: state != before)
        decision.noteRefundCredits(before: before.credits, after: state.credits, transactionId: current.transactionId)
        if current.revocationDate != nil {
            decision.accessGranted = false
            decision.reason = .revoked
        } else if current.kind == .autoRenewable {
            decision.accessGranted = subscription?.status.grantsAccess ?? false
            decision.reason = decision.accessGranted ? nil : (subscription?.status == .revoked ? .revoked : .expired)
        } else if current.kind == .nonRenewing, !(state.periods.last { $0.transactionId == current.transactionId }?.covers(now) ?? false) {
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
        if fact.revocationDate == nil {
            // The refund is Apple's word as of `date`: a view of the transaction signed
            // before it (one an app kept from before the refund) is older and cannot undo it.
            fact.revocationDate = date
            fact.signedDate = max(fact.signedDate ?? date, date)
        }
        state.transactions[transactionId] = fact
        endTransaction(fact, at: fact.revocationDate ?? date, reason: familyRevocation ? .revoked : .refunded, in: &state)
        var decision = EntitlementDecision(
            accessGranted: false, offerId: publisher.offer(forProduct: fact.productId)?.offerId, entitlements: state.entitlements(at: date),
            subscription: state.subscriptions[fact.originalTransactionId], reason: .revoked, creditsAdded: 0,
            creditBalance: state.credits.balance, changed: state != before)
        decision.noteRefundCredits(before: before.credits, after: state.credits, transactionId: transactionId)
        return decision
    }

    /// A newer view of a transaction for a customer who held the purchase before (it was
    /// transferred away): only their history changes. A refund ends their periods of it at
    /// the refund date (nothing after their release is touched), a reversal gives back what
    /// the refund took. No access, credits or subscription comes back: they no longer hold it.
    /// Returns whether anything changed.
    @discardableResult
    public func amendHistory(with fact: PurchaseFact, in state: inout CustomerEntitlements) -> Bool {
        guard let known = state.transactions[fact.transactionId], !state.holds(originalTransactionId: fact.originalTransactionId) else {
            return false
        }
        if fact.isOlderView(than: known) { return false }
        let before = state
        let newer = fact.filled(from: known)
        state.transactions[fact.transactionId] = newer
        for index in state.periods.indices where state.periods[index].transactionId == fact.transactionId {
            if let revoked = newer.revocationDate {
                state.periods[index].endEarly(at: revoked, because: newer.isFamilyShared ? .revoked : .refunded)
            } else if state.periods[index].endReason == .refunded || state.periods[index].endReason == .revoked {
                state.periods[index].endedAt = nil
                state.periods[index].endReason = nil
            }
        }
        if known.revocationDate != nil, newer.revocationDate == nil, let signed = newer.signedDate {
            state.transactions[fact.transactionId]?.reversedAt = signed
        }
        return state != before
    }

    /// Apple said a subscription has expired (verifyReceipt's 21006, which names no
    /// transaction): its access ends at `date` if it ran later, auto-renew is off and no
    /// billing retry is expected. A subscription already over changes nothing.
    public func expire(originalTransactionId original: String, at date: Date, in state: inout CustomerEntitlements) -> EntitlementDecision {
        let before = state
        if var record = state.subscriptions[original] {
            for index in state.periods.indices where state.periods[index].originalTransactionId == original {
                if state.periods[index].effectiveEnd.map({ $0 > date }) ?? true {
                    state.periods[index].endEarly(at: date, because: .expired)
                }
            }
            record.autoRenew = false
            record.isInBillingRetry = false
            state.subscriptions[original] = record
            state.endBillingRetry(of: original, at: date)
            refreshStatus(of: original, in: &state, now: date)
        }
        var decision = EntitlementDecision.refused(.expired, offerId: state.subscriptions[original]?.offerId, state: state, now: date)
        decision.subscription = state.subscription(originalTransactionId: original, at: date)
        decision.changed = state != before
        return decision
    }

    /// Whether a purchase another customer holds goes to `claimant`, per the publisher's policy.
    public func resolveOwnership(claimant: String, currentOwner: String?) -> TransferPolicy? {
        guard let currentOwner, currentOwner != claimant else { return nil }
        return publisher.transferPolicy
    }

    // MARK: Rules

    /// Records the access one transaction gives, from its purchase (or from when the customer
    /// came to hold it, `from` or `heldSince`) to `end`.
    private func record(_ fact: PurchaseFact, offer: Offer, end: Date?, from: Date?, in state: inout CustomerEntitlements) {
        let floor = from ?? state.heldSince[fact.originalTransactionId]
        var period = AccessPeriod(
            transactionId: fact.transactionId, originalTransactionId: fact.originalTransactionId, offerId: offer.offerId,
            productId: fact.productId, entitlements: offer.entitlements, start: max(fact.purchaseDate, floor ?? .distantPast), end: end)
        guard let index = state.periods.lastIndex(where: { $0.transactionId == fact.transactionId }) else {
            state.periods.append(period)
            return
        }
        let existing = state.periods[index]
        if let released = existing.released {
            // The customer let this purchase go. Only holding it again (a transfer back)
            // opens a new stint; the old period keeps its end, so history stays true.
            guard let floor, floor >= released else { return }
            state.periods.append(period)
            return
        }
        // Keep an early end already recorded (a refund applied before this view arrived), a
        // later start (the purchase came to this customer by a transfer) and the later
        // natural end (a grace period Apple granted stays granted once it is over).
        period.start = max(period.start, existing.start)
        period.end = existing.end.flatMap { old in end.map { max(old, $0) } }
        period.endedAt = existing.endedAt
        period.endReason = existing.endReason
        period.releasedAt = existing.releasedAt
        state.periods[index] = period
    }

    private func applySubscription(
        _ fact: PurchaseFact, renewal newRenewal: RenewalFact?, offer: Offer, to state: inout CustomerEntitlements, now: Date, from: Date?
    ) {
        let original = fact.originalTransactionId
        let existing = state.subscriptions[original]
        // Renewal info older than what was applied says nothing new (notifications arrive out of order).
        let renewal = newRenewal.flatMap { renewal in
            (existing?.asOf.flatMap { asOf in renewal.signedDate.map { $0 < asOf } } ?? false) ? nil : renewal
        }
        let latestKnown = existing.flatMap { state.transactions[$0.latestTransactionId] }
        let isLatest = latestKnown.map { ($0.purchaseDate, $0.transactionId) <= (fact.purchaseDate, fact.transactionId) } ?? true
        let expires = fact.expiresDate ?? fact.purchaseDate
        // Billing trouble is about the subscription's latest transaction: from the renewal
        // info that came with it, else as last known for this same transaction.
        var inBillingRetry: Bool?
        var graceEnd: Date?
        if isLatest, let renewal {
            inBillingRetry = renewal.isInBillingRetry
            graceEnd = renewal.isInBillingRetry ? renewal.gracePeriodExpiresDate : nil
        } else if isLatest, let existing, existing.latestTransactionId == fact.transactionId {
            inBillingRetry = existing.isInBillingRetry
            graceEnd = existing.gracePeriodExpiresDate
        }
        // A grace period Apple granted is a fact about that transaction, whenever it is learnt;
        // none applies to a monthly commitment (Apple: access ends at a failed renewal).
        let grace = fact.billingPlan?.isMonthlyCommitment == true ? nil : graceEnd.flatMap { $0 > expires ? $0 : nil }
        record(fact, offer: offer, end: grace ?? expires, from: from, in: &state)
        supersedeReplacedProducts(of: original, in: &state)

        guard isLatest else {
            // An older transaction: it adds history, not the subscription's current state.
            if let renewal { applyRenewal(renewal, to: &state, now: now) }
            refreshStatus(of: original, in: &state, now: now)
            return
        }
        trackBillingRetry(
            of: fact, replacing: latestKnown, inBillingRetry: inBillingRetry, said: renewal?.signedDate ?? now,
            holdingSince: from ?? state.heldSince[original], in: &state)
        let sameLatest = existing?.latestTransactionId == fact.transactionId
        state.subscriptions[original] = SubscriptionRecord(
            originalTransactionId: original, offerId: offer.offerId, productId: fact.productId, status: .active,
            expiresDate: fact.expiresDate, gracePeriodExpiresDate: grace, autoRenew: renewal?.autoRenew ?? existing?.autoRenew,
            autoRenewProductId: renewal?.autoRenewProductId ?? existing?.autoRenewProductId,
            latestTransactionId: fact.transactionId, isIntroductoryOffer: fact.isIntroductoryOffer, offerIdentifier: fact.offerIdentifier,
            asOf: [fact.signedDate, renewal?.signedDate, existing?.asOf].compactMap { $0 }.max(), isInBillingRetry: inBillingRetry,
            previousOriginalTransactionId: fact.previousOriginalTransactionId ?? existing?.previousOriginalTransactionId,
            billingPlan: fact.billingPlan?.renewing(renewal?.billingPlan ?? existing?.billingPlan),
            expirationReason: renewal.map(\.expirationReason) ?? (sameLatest ? existing?.expirationReason : nil),
            priceIncreaseConsented: renewal.map(\.priceIncreaseConsented) ?? existing?.priceIncreaseConsented)
        refreshStatus(of: original, in: &state, now: now)
    }

    /// Keeps the history of billing retries true: a newer transaction ends the retry of the
    /// one it replaced (billing recovered) where it starts; Apple saying it is trying to bill
    /// the latest transaction's renewal opens one from that transaction's expiry (or from when
    /// the customer came to hold it); Apple saying it no longer is, with no new transaction,
    /// ends it when Apple said so.
    private func trackBillingRetry(
        of fact: PurchaseFact, replacing previous: PurchaseFact?, inBillingRetry: Bool?, said: Date, holdingSince: Date?,
        in state: inout CustomerEntitlements
    ) {
        let original = fact.originalTransactionId
        if let previous, previous.transactionId != fact.transactionId {
            state.endBillingRetry(of: original, at: fact.purchaseDate)
        }
        let open = state.billingRetries.contains { $0.originalTransactionId == original && $0.to == nil }
        switch inBillingRetry {
        case true?:
            guard !open, fact.revocationDate == nil,
                !state.billingRetries.contains(where: { $0.transactionId == fact.transactionId })
            else { return }
            let expires = fact.expiresDate ?? fact.purchaseDate
            state.billingRetries.append(
                CustomerEntitlements.BillingRetry(
                    originalTransactionId: original, transactionId: fact.transactionId, from: max(expires, holdingSince ?? expires)))
        case false?:
            if open { state.endBillingRetry(of: original, at: said) }
        case nil:
            break
        }
    }

    /// Stores the status the subscription has at `now`, computed as readers compute it.
    private func refreshStatus(of original: String, in state: inout CustomerEntitlements, now: Date) {
        guard var record = state.subscriptions[original] else { return }
        let latest = state.transactions[record.latestTransactionId]
        let asOf = max(now, latest?.purchaseDate ?? now)
        record.status = state.subscription(originalTransactionId: original, at: asOf)?.status ?? .expired
        state.subscriptions[original] = record
    }

    /// A newer transaction of the same subscription ends an older one's access when it starts,
    /// whatever order they were learnt in, in two cases: a product change that took effect
    /// at once (an upgrade, an immediate crossgrade: another product bought before the older
    /// one expired), and a renewal that came during the older one's grace period (billing
    /// recovered: the grace is over).
    private func supersedeReplacedProducts(of original: String, in state: inout CustomerEntitlements) {
        let siblings = state.transactions.values.filter { $0.originalTransactionId == original }
        for index in state.periods.indices where state.periods[index].originalTransactionId == original {
            guard let older = state.transactions[state.periods[index].transactionId] else { continue }
            let expires = older.expiresDate ?? older.purchaseDate
            let graceEnd = state.periods[index].end.flatMap { $0 > expires ? $0 : nil }
            let replacement = siblings.filter { newer in
                // Newer as the subscription orders them: an upgrade bought at the very moment of
                // a renewal (the same purchase date) replaces it.
                guard (newer.purchaseDate, newer.transactionId) > (older.purchaseDate, older.transactionId) else { return false }
                let productChange = newer.productId != older.productId && newer.purchaseDate < expires
                let recovery = graceEnd.map { newer.purchaseDate >= expires && newer.purchaseDate < $0 } ?? false
                return productChange || recovery
            }.map(\.purchaseDate).min()
            if let replacement { state.periods[index].endEarly(at: replacement, because: .superseded) }
        }
    }

    private func applyRenewal(_ renewal: RenewalFact, to state: inout CustomerEntitlements, now: Date) {
        guard var record = state.subscriptions[renewal.originalTransactionId] else { return }
        if let asOf = record.asOf, let signed = renewal.signedDate, signed < asOf { return }
        record.autoRenew = renewal.autoRenew
        record.autoRenewProductId = renewal.autoRenewProductId
        record.billingPlan = record.billingPlan?.renewing(renewal.billingPlan)
        record.asOf = renewal.signedDate ?? record.asOf
        record.expirationReason = renewal.expirationReason
        record.priceIncreaseConsented = renewal.priceIncreaseConsented
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
            cutGrace(of: fact, at: date, period: &state.periods[index])
        }
        if fact.kind == .consumable { state.credits.clawBack(transactionId: fact.transactionId, share: fact.refundedShare, at: date) }
        if var subscription = state.subscriptions[fact.originalTransactionId], subscription.latestTransactionId == fact.transactionId {
            state.endBillingRetry(of: fact.originalTransactionId, at: date)
            subscription.status = .revoked
            // Apple ends the subscription: no billing retry, and a grace period ends here.
            subscription.isInBillingRetry = false
            subscription.gracePeriodExpiresDate = subscription.gracePeriodExpiresDate.flatMap {
                $0 > date ? (date > (fact.expiresDate ?? date) ? date : nil) : $0
            }
            state.subscriptions[fact.originalTransactionId] = subscription
        }
    }

    /// A refund during a grace period ends the subscription there: a reversal later restores
    /// the transaction, not the grace that was cut.
    private func cutGrace(of fact: PurchaseFact, at date: Date, period: inout AccessPeriod) {
        guard fact.kind == .autoRenewable, let end = period.end, let expires = fact.expiresDate, end > expires, date < end else { return }
        period.end = max(expires, date)
    }
}
