import Foundation

/// Derives the lifecycle events a change to a customer makes, from the customer before and
/// after it: the same change always yields the same events with the same ids, and a change
/// that changes nothing yields none, so reruns and replays append nothing twice.
///
/// What happened when is Apple's: each event's `occurredAt` is a date from Apple's data (a
/// purchase, an expiry, a refund, the signing of renewal info), never the moment Entitle
/// learnt it (`recordedAt`).
public struct LifecycleEvents: Sendable {
    public let publisher: Publisher
    /// The App Store's now, when the change is recorded.
    public let now: Date

    public init(publisher: Publisher, now: Date) {
        self.publisher = publisher
        self.now = now
    }

    public func derive(before: CustomerEntitlements, after: CustomerEntitlements) -> [LifecycleEvent] {
        var events: [LifecycleEvent] = []
        events += transactionEvents(before: before, after: after)
        events += subscriptionEvents(before: before, after: after)
        events += creditEvents(before: before, after: after)
        for (original, until) in after.provisional.sorted(by: { $0.key < $1.key }) where before.provisional[original] != until {
            let latest = after.transactions.values.filter { $0.originalTransactionId == original }.max {
                ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId)
            }
            var granted = event(.temporaryAccessGranted, "\(original):\(Self.ms(until))", customer: after.customer, at: now, fact: latest)
            granted.priceMilliunits = nil
            granted.priceSource = nil
            events.append(granted)
        }
        // A grant that left with its purchase (a transfer away) was not resolved by Apple: the
        // `transfer` event says it moved, and the grant moved with it.
        for (original, until) in before.provisional.sorted(by: { $0.key < $1.key })
        where after.provisional[original] == nil && after.holds(originalTransactionId: original) {
            let latest = after.transactions.values.filter { $0.originalTransactionId == original }.max {
                ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId)
            }
            var resolved = event(
                .temporaryAccessResolved, "\(original):\(Self.ms(until))", customer: after.customer, at: now, fact: latest)
            resolved.priceMilliunits = nil
            resolved.priceSource = nil
            resolved.confirmed = after.periods(at: now).contains { $0.originalTransactionId == original }
            events.append(resolved)
        }
        for index in events.indices {
            guard let original = events[index].originalTransactionId else { continue }
            if after.sharedPurchases.contains(original) { events[index].shared = true }
            if let until = after.provisional[original] {
                events[index].provisional = true
                events[index].provisionalUntil = until
            }
        }
        return events
    }

    func event(_ type: LifecycleEventType, _ key: String, customer: String, at date: Date, fact: PurchaseFact? = nil) -> LifecycleEvent {
        var event = LifecycleEvent(
            id: "\(publisher.id):\(customer):\(type.rawValue):\(key)", type: type, publisher: publisher.id, customer: customer,
            occurredAt: date, recordedAt: now)
        if let fact { event.describe(fact, offer: publisher.offer(forProduct: fact.productId)) }
        return event
    }

    static func ms(_ date: Date?) -> String { date.map { String(Int64(($0.timeIntervalSince1970 * 1000).rounded(.down))) } ?? "0" }

    // MARK: Transactions

    func transactionEvents(before: CustomerEntitlements, after: CustomerEntitlements) -> [LifecycleEvent] {
        var events: [LifecycleEvent] = []
        let ordered = after.transactions.values.sorted { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }
        for fact in ordered {
            let original = fact.originalTransactionId
            if let old = before.transactions[fact.transactionId] {
                events += changes(from: old, to: fact, before: before, in: after)
                continue
            }
            // Transactions that came with a transfer (the change that made the customer its
            // holder) are the purchase's past, not new purchases: the `transfer` event says the
            // purchase moved. One bought before the transfer and learnt after it is past too.
            if let since = after.heldSince[original], before.heldSince[original] != since || fact.purchaseDate < since { continue }
            guard after.holds(originalTransactionId: original) else { continue }
            let chain = ordered.filter {
                $0.originalTransactionId == original && ($0.purchaseDate, $0.transactionId) < (fact.purchaseDate, fact.transactionId)
            }
            let bought = purchase(fact, after: chain.last, in: after)
            if let previous = chain.last, bought.contains(where: { $0.resubscribed == true }),
                let lapsed = lapse(of: previous, before: before)
            {
                events.append(lapsed)
            }
            events += bought
            if let kind = fact.offerKind, chain.last.map({ $0.offerKind != kind || $0.offerIdentifier != fact.offerIdentifier }) ?? true {
                var redeemed = event(.offerRedeemed, fact.transactionId, customer: after.customer, at: fact.purchaseDate, fact: fact)
                redeemed.offerKind = kind
                redeemed.offerIdentifier = fact.offerIdentifier
                redeemed.priceMilliunits = nil
                redeemed.priceSource = nil
                events.append(redeemed)
            }
            if let revoked = fact.revocationDate { events += refund(fact, at: revoked, in: after) }
        }
        return events
    }

    /// The event a new transaction is: exactly one of the revenue-carrying types (or a trial's
    /// start), and a recovery when it ends a billing retry.
    func purchase(_ fact: PurchaseFact, after previous: PurchaseFact?, in state: CustomerEntitlements) -> [LifecycleEvent] {
        let customer = state.customer
        guard fact.kind == .autoRenewable else {
            return [event(.nonRenewingPurchase, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact)]
        }
        guard let previous else {
            let type: LifecycleEventType = fact.isFreeTrial ? .trialStarted : .initialPurchase
            return [event(type, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact)]
        }
        let previousExpires = previous.expiresDate ?? previous.purchaseDate
        if fact.productId != previous.productId, fact.purchaseDate < previousExpires {
            var change = event(.productChange, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact)
            change.fromProductId = previous.productId
            change.toProductId = fact.productId
            change.effective = "immediate"
            change.change = kind(from: previous.productId, to: fact.productId)
            return [change]
        }
        // Billing that had failed went through: the previous period's renewal, late (in its
        // grace period or billing retry). Otherwise a purchase after the previous period ended
        // is a resubscription.
        // (A retry Apple gave up on before this purchase is not one it recovered from.)
        let retried = state.billingRetries.contains { retry in
            retry.transactionId == previous.transactionId && (retry.to.map { $0 >= fact.purchaseDate } ?? true)
        }
        let graceEnd = state.periods.filter { $0.transactionId == previous.transactionId }.compactMap(\.end).max()
        let inGrace = graceEnd.map { $0 > previousExpires && fact.purchaseDate < $0 } ?? false
        let recovered = retried || inGrace
        let lapsed = !recovered && fact.purchaseDate > previousExpires
        var events: [LifecycleEvent] = []
        if previous.isFreeTrial, !fact.isFreeTrial, !lapsed {
            events.append(event(.trialConverted, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact))
        } else {
            var renewal = event(.renewal, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact)
            if fact.productId != previous.productId { renewal.fromProductId = previous.productId }
            if lapsed { renewal.resubscribed = true }
            events.append(renewal)
        }
        if recovered { events.append(event(.billingRecovered, fact.transactionId, customer: customer, at: fact.purchaseDate, fact: fact)) }
        return events
    }

    /// The `expiration` of the period a resubscription follows, when the customer had turned
    /// auto-renew off (or no renewal info said) and nothing said yet that it ended (Apple's
    /// EXPIRED still on its way): the same event (id, date, reason) that EXPIRED makes when it
    /// comes first, so the log is the same whichever news came first. With auto-renew on, a gap before a purchase may
    /// be renewals not told yet (a backlog delivered newest first): nothing is said.
    func lapse(of previous: PurchaseFact, before: CustomerEntitlements) -> LifecycleEvent? {
        guard let record = before.subscriptions[previous.originalTransactionId], record.latestTransactionId == previous.transactionId,
            record.autoRenew != true, !Self.endedForGood(record)
        else { return nil }
        return expiration(record, latest: previous, in: before)
    }

    /// Whether a subscription has ended for good, as Apple's data says: revoked, or expired
    /// with Apple's reason, or after the customer turned auto-renew off (or with no renewal
    /// info to say). One past its expiry with auto-renew on and no reason has stopped giving
    /// access, but may have renewed (the renewal's news late, a burst of notifications out of
    /// order) or be about to retry billing: its `expiration` waits for Apple's word (a
    /// notification, a renewal check) or for the next purchase, which shows the lapse.
    public static func endedForGood(_ record: SubscriptionRecord) -> Bool {
        switch record.status {
        case .revoked: true
        case .expired: record.expirationReason != nil || record.autoRenew != true
        case .active, .gracePeriod, .billingRetry: false
        }
    }

    /// An upgrade, a downgrade or a crossgrade, by the products' levels in their group
    /// (1 is the highest).
    func kind(from: String, to: String) -> String {
        guard let old = publisher.level(ofProduct: from), let new = publisher.level(ofProduct: to), old != new else {
            return "crossgrade"
        }
        return new < old ? "upgrade" : "downgrade"
    }

    /// What a newer view of a known transaction says happened: a refund or revocation, its
    /// reversal, a renewal date extended. Only the customer holding the purchase (or credited
    /// with a consumable) is told, so each is one event, never one per former holder.
    func changes(
        from old: PurchaseFact, to fact: PurchaseFact, before: CustomerEntitlements, in state: CustomerEntitlements
    ) -> [LifecycleEvent] {
        guard state.holds(originalTransactionId: fact.originalTransactionId) else { return [] }
        var events: [LifecycleEvent] = []
        if let revoked = fact.revocationDate, old.revocationDate == nil {
            events += refund(fact, at: revoked, in: state)
        } else if let was = old.revocationDate, fact.revocationDate != nil, old.revocationType == nil, fact.revocationType != nil {
            events += refundAdjustment(from: old, to: fact, at: was, in: state)
        } else if fact.revocationDate == nil, let was = old.revocationDate {
            let at = fact.signedDate ?? now
            var reversed = event(
                .refundReversed, "\(fact.transactionId):\(Self.ms(was)):\(Self.ms(at))", customer: state.customer, at: at, fact: fact)
            // What the refund took, given back: the reports count the refund and its amount off.
            reversed.revocationType = old.revocationType
            reversed.revocationPercentage = old.revocationPercentage
            let family = old.revocationType == "FAMILY_REVOKE" || (old.revocationType == nil && old.isFamilyShared)
            if !family, let price = reversed.priceMilliunits {
                reversed.refundMilliunits = Self.share(of: price, milliunits: old.refundedShare)
            }
            // The refund had ended the subscription (its `expiration`, reason `refund`): it goes
            // on, or, past its expiry with no word from Apple, ends when Apple says (its own
            // `expiration` then).
            let original = fact.originalTransactionId
            if before.subscriptions[original]?.status == .revoked, let record = state.subscriptions[original], !Self.endedForGood(record) {
                reversed.restored = true
                reversed.trial = fact.isFreeTrial ? true : nil
            }
            events.append(reversed)
        }
        if fact.revocationDate == nil, let new = fact.expiresDate, let was = old.expiresDate, new > was,
            fact.transactionId == state.subscriptions[fact.originalTransactionId]?.latestTransactionId
        {
            var extended = event(
                .extension, "\(fact.transactionId):\(Self.ms(new))", customer: state.customer, at: fact.signedDate ?? now, fact: fact)
            extended.previousExpiresDate = was
            extended.priceMilliunits = nil
            extended.priceSource = nil
            events.append(extended)
        }
        return events
    }

    func refund(_ fact: PurchaseFact, at date: Date, in state: CustomerEntitlements) -> [LifecycleEvent] {
        let family = fact.revocationType == "FAMILY_REVOKE" || (fact.revocationType == nil && fact.isFamilyShared)
        var refund = event(
            family ? .revoked : .refund, "\(fact.transactionId):\(Self.ms(date))", customer: state.customer, at: date, fact: fact)
        refund.revocationType = fact.revocationType
        refund.revocationPercentage = fact.revocationPercentage
        if !family, let price = refund.priceMilliunits {
            refund.refundMilliunits = Self.share(of: price, milliunits: fact.refundedShare)
        }
        return [refund]
    }

    /// A refund first told by a receipt, or by a V1 notification alone (a date, no kind or
    /// share: counted as the whole price), now told by Apple's signed view: what the refund
    /// took, on the day and in the product, storefront, price and currency the refund was
    /// counted in, so the reports add up to Apple's records whichever view came first. None
    /// when the amount stands (a full refund) or either view is a family revocation, which
    /// carries no amount.
    func refundAdjustment(
        from old: PurchaseFact, to fact: PurchaseFact, at date: Date, in state: CustomerEntitlements
    )
        -> [LifecycleEvent]
    {
        func family(_ view: PurchaseFact) -> Bool {
            view.revocationType == "FAMILY_REVOKE" || (view.revocationType == nil && view.isFamilyShared)
        }
        guard !family(old), !family(fact) else { return [] }
        var adjusted = event(.refundAdjusted, "\(fact.transactionId):\(Self.ms(date))", customer: state.customer, at: date, fact: old)
        guard let price = adjusted.priceMilliunits else { return [] }
        adjusted.revocationType = fact.revocationType
        adjusted.revocationPercentage = fact.revocationPercentage
        adjusted.refundMilliunits = Self.share(of: price, milliunits: fact.refundedShare)
        adjusted.previousRefundMilliunits = Self.share(of: price, milliunits: old.refundedShare)
        return adjusted.refundMilliunits == adjusted.previousRefundMilliunits ? [] : [adjusted]
    }

    /// `amount × milliunits / 100000`, rounded to the nearest, halves up.
    public static func share(of amount: Int64, milliunits: Int) -> Int64 {
        let clamped = Int64(min(max(milliunits, 0), 100_000))
        let (product, overflow) = amount.multipliedReportingOverflow(by: clamped)
        guard !overflow else { return amount / 100_000 * clamped }
        return (product + 50_000) / 100_000
    }

    // MARK: Subscriptions

    func subscriptionEvents(before: CustomerEntitlements, after: CustomerEntitlements) -> [LifecycleEvent] {
        var events: [LifecycleEvent] = []
        let customer = after.customer
        for (original, record) in after.subscriptions.sorted(by: { $0.key < $1.key }) {
            guard let latest = after.transactions[record.latestTransactionId] else { continue }
            let old = before.subscriptions[original]
            let said = record.asOf ?? now
            // A subscription that came with a transfer: the `transfer` event says so; its state
            // (billing, an expiry) is the previous holder's past.
            if old == nil, after.heldSince[original] != nil { continue }
            if let old {
                if old.autoRenew == true, record.autoRenew == false, record.status.grantsAccess || record.status == .billingRetry {
                    var cancelled = event(.cancellation, "\(original):\(Self.ms(said))", customer: customer, at: said, fact: latest)
                    cancelled.reason = record.priceIncreaseConsented == false ? "priceIncreaseDeclined" : "voluntary"
                    events.append(cancelled)
                } else if old.autoRenew == false, record.autoRenew == true {
                    events.append(event(.uncancellation, "\(original):\(Self.ms(said))", customer: customer, at: said, fact: latest))
                }
                if let next = record.autoRenewProductId, next != old.autoRenewProductId, next != record.productId,
                    old.autoRenewProductId != nil
                {
                    var change = event(.productChange, "\(original):\(next):\(Self.ms(said))", customer: customer, at: said, fact: latest)
                    change.fromProductId = record.productId
                    change.toProductId = next
                    change.effective = "atRenewal"
                    change.change = kind(from: record.productId, to: next)
                    change.priceMilliunits = nil
                    change.priceSource = nil
                    events.append(change)
                }
                if let consented = record.priceIncreaseConsented, consented != old.priceIncreaseConsented {
                    var increase = event(
                        .priceIncrease, "\(original):\(consented):\(Self.ms(said))", customer: customer, at: said, fact: latest)
                    increase.consented = consented
                    increase.priceMilliunits = nil
                    increase.priceSource = nil
                    events.append(increase)
                }
            }
            let expires = latest.expiresDate ?? latest.purchaseDate
            let retrying = record.isInBillingRetry == true && latest.revocationDate == nil
            let wasRetrying = old?.isInBillingRetry == true && old?.latestTransactionId == latest.transactionId
            if retrying, !wasRetrying {
                var issue = event(.billingIssue, latest.transactionId, customer: customer, at: expires, fact: latest)
                issue.gracePeriodExpiresDate = record.gracePeriodExpiresDate
                issue.priceMilliunits = nil
                issue.priceSource = nil
                events.append(issue)
            }
            if retrying, let grace = record.gracePeriodExpiresDate, grace > expires,
                !(wasRetrying && (old?.gracePeriodExpiresDate.map { $0 > expires } ?? false))
            {
                var started = event(.gracePeriodStarted, latest.transactionId, customer: customer, at: expires, fact: latest)
                started.gracePeriodExpiresDate = grace
                started.priceMilliunits = nil
                started.priceSource = nil
                events.append(started)
            }
            if retrying, old?.status == .gracePeriod, record.status == .billingRetry, old?.latestTransactionId == latest.transactionId {
                let graceEnd = old?.gracePeriodExpiresDate ?? record.gracePeriodExpiresDate ?? expires
                var lapsed = event(.gracePeriodExpired, latest.transactionId, customer: customer, at: graceEnd, fact: latest)
                lapsed.gracePeriodExpiresDate = graceEnd
                lapsed.priceMilliunits = nil
                lapsed.priceSource = nil
                events.append(lapsed)
            }
            if Self.endedForGood(record), !(old.map(Self.endedForGood) ?? false) {
                events.append(expiration(record, latest: latest, in: after))
            }
        }
        return events
    }

    /// A subscription ended for good: when its last access ended, and why, as Apple says.
    func expiration(_ record: SubscriptionRecord, latest: PurchaseFact, in state: CustomerEntitlements) -> LifecycleEvent {
        let retry = state.billingRetries.last { $0.transactionId == latest.transactionId }
        let accessEnd = state.periods.filter { $0.transactionId == latest.transactionId }.compactMap(\.effectiveEnd).max()
        let end: Date
        let reason: String
        if record.status == .revoked, let revoked = latest.revocationDate {
            (end, reason) = (revoked, "refund")
        } else {
            end = [retry?.to, accessEnd, latest.expiresDate].compactMap { $0 }.max() ?? latest.purchaseDate
            switch record.expirationReason {
            case .customerCancelled?: reason = "voluntary"
            case .billingError?: reason = "billing"
            case .priceIncreaseDeclined?: reason = "priceIncreaseDeclined"
            case .productUnavailable?: reason = "productNotForSale"
            case .other?: reason = "other"
            case nil where retry != nil: reason = "billing"
            case nil where record.priceIncreaseConsented == false: reason = "priceIncreaseDeclined"
            case nil: reason = record.autoRenew == false ? "voluntary" : "other"
            }
        }
        var expired = event(.expiration, "\(record.originalTransactionId):\(Self.ms(end))", customer: state.customer, at: end, fact: latest)
        expired.reason = reason
        expired.trial = latest.isFreeTrial ? true : nil
        expired.priceMilliunits = nil
        expired.priceSource = nil
        return expired
    }

    // MARK: Credits

    func creditEvents(before: CustomerEntitlements, after: CustomerEntitlements) -> [LifecycleEvent] {
        let entries = after.credits.entries
        let known = before.credits.entries.count
        var events: [LifecycleEvent] = []
        var balance = before.credits.balance
        func credit(_ type: LifecycleEventType, _ key: String, _ entry: CreditLedger.Entry, amount: Int) -> LifecycleEvent {
            let previous = balance
            balance += amount
            let fact = after.transactions[entry.transactionId]
            var credit = event(type, key, customer: after.customer, at: entry.at, fact: fact)
            credit.offerId = entry.offerId.isEmpty ? credit.offerId : entry.offerId
            credit.amount = abs(amount)
            credit.balance = balance
            credit.previousBalance = previous
            credit.revocationPercentage = entry.kind == .clawback ? entry.percentage : nil
            credit.shortfall = entry.shortfall
            credit.reference = entry.reference
            // A spend names no transaction: it counts where the credits came from.
            if fact == nil { credit.environment = after.creditsEnvironment }
            credit.reason = entry.kind == .reinstatement ? "refundReversed" : nil
            // The purchase's price is on its own event; a credit event carries none.
            credit.priceMilliunits = nil
            credit.priceSource = nil
            credit.currency = nil
            return credit
        }
        // A clawback brought to the share Apple told after it (`settleClawback`): what it gave
        // back, or took besides.
        for index in 0..<min(known, entries.count) where entries[index].kind == .clawback {
            let (was, entry) = (before.credits.entries[index], entries[index])
            guard was.kind == .clawback, was.amount != entry.amount || was.percentage != entry.percentage else { continue }
            let change = entry.amount - was.amount
            let key = "\(entry.transactionId):clawback:\(index):\(entry.percentage ?? 100_000)"
            var settled = credit(change > 0 ? .creditsGranted : .creditsClawedBack, key, entry, amount: change)
            settled.reason = "refundAdjusted"
            events.append(settled)
        }
        for index in known..<max(known, entries.count) {
            let entry = entries[index]
            let type: LifecycleEventType
            let key: String
            switch entry.kind {
            case .purchase: (type, key) = (.creditsGranted, "\(entry.transactionId):purchase")
            case .reinstatement: (type, key) = (.creditsGranted, "\(entry.transactionId):reinstatement:\(index)")
            case .spend: (type, key) = (.creditsSpent, "spend:\(entry.reference ?? String(index))")
            case .clawback: (type, key) = (.creditsClawedBack, "\(entry.transactionId):clawback:\(index)")
            }
            events.append(credit(type, key, entry, amount: entry.amount))
        }
        return events
    }
}
