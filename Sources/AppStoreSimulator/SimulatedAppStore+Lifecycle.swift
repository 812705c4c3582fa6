import AppStore
import Foundation

/// Lifecycle events, on command and on schedule.
extension SimulatedAppStore {
    // MARK: Time

    /// Applies everything the clock has reached, earliest first: renewals, billing
    /// failures, grace-period and billing-retry ends, expiries.
    public func processDue() async throws {
        let now = clock.now
        while let (date, id) = due.popDue(before: now) {
            guard let subscription = subscriptions[id], subscription.nextDue == date else { continue }
            try await handleDue(subscription, at: date)
        }
    }

    /// Moves the clock forward and applies what falls due, in order.
    @discardableResult
    public func advanceClock(by seconds: TimeInterval) async throws -> Date {
        guard seconds >= 0, seconds <= 100 * 365 * 86_400 else {
            throw SimulatorError(.invalidRequest, "seconds must be between 0 and 100 years")
        }
        let now = clock.advance(by: seconds)
        try await processDue()
        return now
    }

    /// When the scheduler next has work.
    public var nextDueDate: Date? { due.next }

    private func handleDue(_ subscription: SimulatedSubscription, at date: Date) async throws {
        happeningAt = date
        defer { happeningAt = nil }
        var subscription = subscription
        switch subscription.state {
        case .active:
            let declinedIncrease = subscription.priceIncrease.map { $0.requiresConsent && $0.consented != true } ?? false
            let atLimit = subscription.environment == .sandbox && subscription.renewals >= sandboxRenewalLimit
            // A commitment whose renewal is off ends after its last month.
            let commitmentEnds = subscription.commitment.map { $0.period >= $0.periods && !$0.renews } ?? false
            if !subscription.autoRenew || declinedIncrease || atLimit || commitmentEnds {
                subscription.state = .expired
                subscription.autoRenew = false
                subscription.expirationIntent = declinedIncrease ? .declinedPriceIncrease : atLimit ? .other : .customerCancelled
                save(subscription)
                try await notify(
                    .expired, declinedIncrease ? .priceIncrease : .voluntary, v1: nil, transactionId: subscription.latestTransactionId)
            } else if subscription.paymentFails {
                subscription.expirationIntent = .billingError
                subscription.billingRetryEnds = date.addingTimeInterval(SubscriptionPeriod.days(60, environment: subscription.environment))
                // No billing grace period for a monthly commitment: access ends at the failure.
                if let days = catalog.app(subscription.bundleId)?.gracePeriodDays, subscription.commitment == nil {
                    subscription.state = .gracePeriod
                    subscription.gracePeriodExpires = date.addingTimeInterval(
                        SubscriptionPeriod.days(days, environment: subscription.environment))
                } else {
                    subscription.state = .billingRetry
                }
                save(subscription)
                try await notify(
                    .didFailToRenew, subscription.state == .gracePeriod ? .gracePeriod : nil, v1: "DID_FAIL_TO_RENEW",
                    transactionId: subscription.latestTransactionId)
            } else {
                let id = try renewTransaction(&subscription, at: date)
                try await notify(.didRenew, nil, v1: "DID_RENEW", transactionId: id)
            }
        case .gracePeriod:
            subscription.state = .billingRetry
            subscription.gracePeriodExpires = nil
            save(subscription)
            try await notify(.gracePeriodExpired, nil, v1: nil, transactionId: subscription.latestTransactionId)
        case .billingRetry:
            subscription.state = .expired
            subscription.billingRetryEnds = nil
            save(subscription)
            try await notify(.expired, .billingRetry, v1: nil, transactionId: subscription.latestTransactionId)
        case .expired, .revoked:
            break
        }
    }

    /// Bills the next period: a new transaction for the auto-renew product, starting at
    /// `date`. An immediate product change is a `.purchase` and does not count as a renewal.
    func renewTransaction(
        _ subscription: inout SimulatedSubscription, at date: Date, reason: TransactionReason = .renewal
    ) throws
        -> String
    {
        guard let product = catalog.product(subscription.autoRenewProductId), let period = product.period else {
            throw SimulatorError(.notFound, "subscription \(subscription.originalTransactionId) has no product to renew")
        }
        if var commitment = subscription.commitment, reason == .renewal {
            // The next month of the commitment, or month 1 of a renewed commitment.
            if commitment.period >= commitment.periods {
                commitment.period = 1
                commitment.expiresDate = period.end(from: date, environment: subscription.environment)
            } else {
                commitment.period += 1
            }
            subscription.commitment = commitment
        }
        var transaction = JWSTransaction()
        transaction.transactionId = newTransactionId()
        transaction.originalTransactionId = subscription.originalTransactionId
        transaction.bundleId = subscription.bundleId
        transaction.productId = product.productId
        transaction.purchaseDate = AppleTimestamp(date)
        transaction.originalPurchaseDate = AppleTimestamp(subscription.originalPurchaseDate)
        transaction.quantity = 1
        transaction.type = .autoRenewable
        transaction.appAccountToken = subscription.appAccountToken
        transaction.inAppOwnershipType = subscription.ownership
        transaction.environment = subscription.environment
        transaction.storefront = subscription.storefront
        transaction.storefrontId = transactions[subscription.latestTransactionId]?.transaction.storefrontId
        transaction.transactionReason = reason
        transaction.currency = subscription.currency
        transaction.appTransactionId = Self.appTransactionId(account: subscription.account, bundleId: subscription.bundleId)
        let regular = product.price(in: subscription.storefront)?.milliunits ?? 0
        let record = fillSubscriptionPeriod(
            SimulatedTransaction(transaction: transaction, account: subscription.account, orderId: Self.newOrderId()),
            subscription: &subscription, start: date, period: period, regularPrice: regular)
        if subscription.priceIncrease?.consented == true || subscription.priceIncrease?.requiresConsent == false {
            subscription.priceIncrease?.requiresConsent = false
        }
        subscription.productId = product.productId
        if reason == .renewal { subscription.renewals += 1 }
        subscription.state = .active
        subscription.gracePeriodExpires = nil
        subscription.billingRetryEnds = nil
        subscription.expirationIntent = nil
        store(record)
        save(subscription)
        return record.id
    }

    // MARK: Subscription events

    func subscription(_ originalTransactionId: String) throws -> SimulatedSubscription {
        guard let subscription = subscriptions[originalTransactionId] else {
            throw SimulatorError(.notFound, "no subscription with original transaction id \(originalTransactionId)")
        }
        return subscription
    }

    /// Renews an active subscription now, without waiting for its expiry.
    public func renew(_ originalTransactionId: String) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard subscription.state == .active else {
            throw SimulatorError(.conflict, "only an active subscription renews on command; use billing-recovery or a new purchase")
        }
        let id = try renewTransaction(&subscription, at: clock.now)
        let uuid = try await notify(.didRenew, nil, v1: "DID_RENEW", transactionId: id)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// The customer turns auto-renew off or on.
    public func setAutoRenew(_ originalTransactionId: String, enabled: Bool) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard subscription.state != .expired, subscription.state != .revoked else {
            throw SimulatorError(.conflict, "the subscription has ended; buy it again")
        }
        if var commitment = subscription.commitment {
            // Turning off a commitment's renewal ends the commitment at its end, not the
            // months still to bill: the subscription's own auto-renew stays on.
            guard commitment.renews != enabled else {
                throw SimulatorError(.conflict, "the commitment's renewal is already \(enabled ? "on" : "off")")
            }
            commitment.renews = enabled
            subscription.commitment = commitment
        } else {
            guard subscription.autoRenew != enabled else {
                throw SimulatorError(.conflict, "auto-renew is already \(enabled ? "on" : "off")")
            }
            subscription.autoRenew = enabled
        }
        if enabled, subscription.priceIncrease?.consented == false { subscription.priceIncrease?.consented = nil }
        save(subscription)
        let uuid = try await notify(
            .didChangeRenewalStatus, enabled ? .autoRenewEnabled : .autoRenewDisabled, v1: "DID_CHANGE_RENEWAL_STATUS",
            transactionId: subscription.latestTransactionId)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// The customer's payment method starts failing: the next renewal fails, then grace
    /// period (when the app has one), billing retry, and expiry unless billing recovers.
    public func failBilling(_ originalTransactionId: String) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        subscription.paymentFails = true
        save(subscription)
        return try snapshot(originalTransactionId, notifications: [])
    }

    /// The customer fixes billing. In grace period or billing retry, Apple bills at once and
    /// a new period starts now (`DID_RENEW` / `BILLING_RECOVERY`).
    public func recoverBilling(_ originalTransactionId: String) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        subscription.paymentFails = false
        guard subscription.state == .gracePeriod || subscription.state == .billingRetry else {
            save(subscription)
            return try snapshot(originalTransactionId, notifications: [])
        }
        let id = try renewTransaction(&subscription, at: clock.now)
        let uuid = try await notify(.didRenew, .billingRecovery, v1: "DID_RECOVER", transactionId: id)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// What an upgrade, downgrade or crossgrade asks for.
    public enum ProductChange: String, Sendable {
        case upgrade, downgrade, crossgrade
    }

    /// Moves to another product of the group: an upgrade (a higher level: level 1 is the
    /// highest) takes effect at once; a downgrade at the next renewal; a crossgrade (same
    /// level) at once when the periods match, otherwise at renewal.
    public func changeProduct(
        _ originalTransactionId: String, to productId: String, as change: ProductChange
    ) async throws
        -> SubscriptionSnapshot
    {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard subscription.state == .active || subscription.state == .gracePeriod else {
            throw SimulatorError(.conflict, "only an active subscription changes product")
        }
        guard let current = catalog.product(subscription.productId), let target = catalog.product(productId),
            target.subscriptionGroup == subscription.groupId, target.productId != current.productId,
            let currentLevel = current.level, let targetLevel = target.level
        else {
            throw SimulatorError(.invalidRequest, "\(productId) is not another product of subscription group \(subscription.groupId)")
        }
        let immediate: Bool
        switch change {
        case .upgrade:
            guard targetLevel < currentLevel else { throw SimulatorError(.invalidRequest, "\(productId) is not a higher level") }
            immediate = true
        case .downgrade:
            guard targetLevel > currentLevel else { throw SimulatorError(.invalidRequest, "\(productId) is not a lower level") }
            immediate = false
        case .crossgrade:
            guard targetLevel == currentLevel else { throw SimulatorError(.invalidRequest, "\(productId) is not at the same level") }
            immediate = target.period == current.period
        }
        subscription.autoRenewProductId = productId
        subscription.autoRenew = true
        if !immediate {
            save(subscription)
            let uuid = try await notify(
                .didChangeRenewalPref, .downgrade, v1: "DID_CHANGE_RENEWAL_PREF", transactionId: subscription.latestTransactionId)
            return try snapshot(originalTransactionId, notifications: [uuid])
        }
        // At once: the current transaction is marked upgraded and a new period starts now.
        transactions[subscription.latestTransactionId]?.transaction.isUpgraded = true
        subscription.offer = nil
        subscription.recentStartDate = clock.now
        let id = try renewTransaction(&subscription, at: clock.now, reason: .purchase)
        let uuid = try await notify(.didChangeRenewalPref, .upgrade, v1: "INTERACTIVE_RENEWAL", transactionId: id)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// Announces a price increase for the next renewals. With consent required, the
    /// subscription expires at renewal unless the customer agrees.
    public func increasePrice(_ originalTransactionId: String, price: Double, requiresConsent: Bool) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard subscription.state != .expired, subscription.state != .revoked else {
            throw SimulatorError(.conflict, "the subscription has ended")
        }
        guard price > 0, price < 100_000 else { throw SimulatorError(.invalidRequest, "price must be a positive amount") }
        subscription.priceIncrease = .init(price: Int64((price * 1000).rounded()), requiresConsent: requiresConsent, consented: nil)
        save(subscription)
        let uuid = try await notify(
            .priceIncrease, requiresConsent ? .pending : .accepted, v1: requiresConsent ? "PRICE_INCREASE_CONSENT" : nil,
            transactionId: subscription.latestTransactionId)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// The customer agrees to or declines a price increase. Declining turns auto-renew off.
    public func respondToPriceIncrease(_ originalTransactionId: String, accept: Bool) async throws -> SubscriptionSnapshot {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard subscription.priceIncrease?.requiresConsent == true, subscription.priceIncrease?.consented == nil else {
            throw SimulatorError(.conflict, "no price increase awaits the customer's consent")
        }
        subscription.priceIncrease?.consented = accept
        if !accept { subscription.autoRenew = false }
        save(subscription)
        let uuid =
            accept
            ? try await notify(.priceIncrease, .accepted, v1: nil, transactionId: subscription.latestTransactionId)
            : try await notify(
                .didChangeRenewalStatus, .autoRenewDisabled, v1: "DID_CHANGE_RENEWAL_STATUS",
                transactionId: subscription.latestTransactionId)
        return try snapshot(originalTransactionId, notifications: [uuid])
    }

    /// Extends the renewal date by 1 to 90 days (the App Store Server API's Extend a
    /// Subscription Renewal Date, also a control route). Repeats of a request id change nothing.
    public func extendRenewalDate(
        _ originalTransactionId: String, days: Int, reasonCode: Int, requestIdentifier: String
    ) async throws
        -> (snapshot: SubscriptionSnapshot, effectiveDate: Date, webOrderLineItemId: String?)
    {
        try await processDue()
        var subscription = try subscription(originalTransactionId)
        guard (1...90).contains(days) else { throw SimulatorError(.invalidRequest, "extendByDays must be 1 to 90") }
        guard (0...3).contains(reasonCode) else { throw SimulatorError(.invalidRequest, "extendReasonCode must be 0 to 3") }
        guard subscription.state == .active else { throw SimulatorError(.conflict, "only an active subscription can be extended") }
        var notifications: [String] = []
        if subscription.extensionRequests.insert(requestIdentifier).inserted {
            subscription.expiresDate = subscription.expiresDate.addingTimeInterval(
                SubscriptionPeriod.days(days, environment: subscription.environment))
            transactions[subscription.latestTransactionId]?.transaction.expiresDate = AppleTimestamp(subscription.expiresDate)
            save(subscription)
            notifications.append(try await notify(.renewalExtended, nil, v1: nil, transactionId: subscription.latestTransactionId))
        }
        return (
            try snapshot(originalTransactionId, notifications: notifications), subscription.expiresDate,
            transactions[subscription.latestTransactionId]?.transaction.webOrderLineItemId
        )
    }

    // MARK: Transaction events

    func transaction(_ transactionId: String) throws -> SimulatedTransaction {
        guard let record = transactions[transactionId] else { throw SimulatorError(.notFound, "no transaction \(transactionId)") }
        return record
    }

    /// Apple refunds a transaction: in full (`REFUND_FULL`, `revocationPercentage` 100000),
    /// or a share of it (`REFUND_PRORATED`) when `percentage` is given, in Apple's unit:
    /// milliunits of a percent, 1 to 99999 (50000 is 50 %, 33333 about a third). A refunded
    /// subscription transaction that is the latest ends the subscription; a consumable's
    /// refund is the publisher's to claw back.
    public func refund(_ transactionId: String, reason: Int = 0, percentage: Int? = nil) async throws -> TransactionSnapshot {
        try await processDue()
        var record = try transaction(transactionId)
        guard !record.isRevoked else { throw SimulatorError(.conflict, "transaction \(transactionId) is already refunded or revoked") }
        guard reason == 0 || reason == 1 else { throw SimulatorError(.invalidRequest, "reason must be 0 (other) or 1 (app issue)") }
        if let percentage, !(1...99_999).contains(percentage) {
            throw SimulatorError(
                .invalidRequest,
                "percentage is Apple's revocationPercentage, in milliunits of a percent: 1 to 99999 for a prorated refund (50000 is 50 %); leave it out for a full refund"
            )
        }
        record.transaction.revocationDate = AppleTimestamp(clock.now)
        record.transaction.revocationReason = RevocationReason(rawValue: reason)
        record.transaction.revocationType = percentage == nil ? .refundFull : .refundProrated
        record.transaction.revocationPercentage = percentage ?? 100_000
        store(record)
        let isSubscription = record.transaction.type == .autoRenewable
        endSubscription(ifLatest: record)
        let uuid = try await notify(.refund, nil, v1: isSubscription ? "CANCEL" : "REFUND", transactionId: transactionId)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    /// Apple declines a refund the customer asked for.
    public func declineRefund(_ transactionId: String) async throws -> TransactionSnapshot {
        let record = try transaction(transactionId)
        guard !record.isRevoked else { throw SimulatorError(.conflict, "transaction \(transactionId) is already refunded") }
        let uuid = try await notify(.refundDeclined, nil, v1: nil, transactionId: transactionId)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    /// Apple reverses a refund (after a dispute): the transaction is whole again.
    public func reverseRefund(_ transactionId: String) async throws -> TransactionSnapshot {
        try await processDue()
        var record = try transaction(transactionId)
        guard record.isRevoked, record.transaction.revocationType != .familyRevoke else {
            throw SimulatorError(.conflict, "transaction \(transactionId) has no refund to reverse")
        }
        record.transaction.revocationDate = nil
        record.transaction.revocationReason = nil
        record.transaction.revocationType = nil
        record.transaction.revocationPercentage = nil
        store(record)
        if let otid = record.transaction.originalTransactionId, var subscription = subscriptions[otid],
            subscription.latestTransactionId == transactionId, subscription.state == .revoked
        {
            subscription.state = subscription.expiresDate > clock.now ? .active : .expired
            save(subscription)
        }
        let uuid = try await notify(.refundReversed, nil, v1: nil, transactionId: transactionId)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    /// The family organizer stops sharing, or the purchaser loses the item: a
    /// family-shared transaction is revoked.
    public func revoke(_ transactionId: String) async throws -> TransactionSnapshot {
        try await processDue()
        var record = try transaction(transactionId)
        guard record.transaction.inAppOwnershipType == .familyShared else {
            throw SimulatorError(.conflict, "only family-shared transactions are revoked; refund a purchased one")
        }
        guard !record.isRevoked else { throw SimulatorError(.conflict, "transaction \(transactionId) is already revoked") }
        record.transaction.revocationDate = AppleTimestamp(clock.now)
        record.transaction.revocationReason = .other
        record.transaction.revocationType = .familyRevoke
        record.transaction.revocationPercentage = 100_000
        store(record)
        endSubscription(ifLatest: record)
        let uuid = try await notify(.revoke, nil, v1: "REVOKE", transactionId: transactionId)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    /// Apple asks for consumption information about a refund request.
    public func requestConsumption(_ transactionId: String, reason: ConsumptionRequestReason?) async throws -> TransactionSnapshot {
        var record = try transaction(transactionId)
        guard !record.isRevoked else { throw SimulatorError(.conflict, "transaction \(transactionId) is already refunded") }
        record.consumptionRequested = true
        record.consumptionRequestedAt = clock.now
        store(record)
        let uuid = try await notify(
            .consumptionRequest, nil, v1: "CONSUMPTION_REQUEST", transactionId: transactionId,
            consumptionReason: reason ?? .unintendedPurchase)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    private func endSubscription(ifLatest record: SimulatedTransaction) {
        guard record.transaction.type == .autoRenewable, let otid = record.transaction.originalTransactionId,
            var subscription = subscriptions[otid], subscription.latestTransactionId == record.id
        else { return }
        subscription.state = .revoked
        subscription.autoRenew = false
        save(subscription)
    }

    // MARK: Snapshots

    func snapshot(_ originalTransactionId: String, notifications: [String]) throws -> SubscriptionSnapshot {
        let subscription = try subscription(originalTransactionId)
        return SubscriptionSnapshot(
            originalTransactionId: originalTransactionId, productId: subscription.productId,
            autoRenewProductId: subscription.autoRenewProductId, status: subscription.state.status, autoRenewStatus: subscription.autoRenew,
            expiresDate: AppleTimestamp(subscription.expiresDate),
            gracePeriodExpiresDate: subscription.gracePeriodExpires.map(AppleTimestamp.init),
            transactionIds: subscription.transactionIds, signedTransaction: try signedTransaction(subscription.latestTransactionId),
            signedRenewalInfo: try signedRenewalInfo(subscription),
            appReceipt: try appReceipt(
                account: subscription.account, bundleId: subscription.bundleId, environment: subscription.environment),
            notifications: notifications, history: subscription.history)
    }

    func transactionSnapshot(_ transactionId: String, notifications: [String]) throws -> TransactionSnapshot {
        let record = try transaction(transactionId)
        return TransactionSnapshot(
            transactionId: transactionId, originalTransactionId: record.transaction.originalTransactionId ?? transactionId,
            productId: record.transaction.productId ?? "", revoked: record.isRevoked,
            signedTransaction: try signedTransaction(transactionId),
            consumption: record.consumption, consumptionV1: record.consumptionV1, finishedDate: record.finishedAt.map(AppleTimestamp.init),
            notifications: notifications)
    }

    /// The current state of a subscription (`GET /simulator/subscriptions/{id}`).
    public func subscriptionSnapshot(_ originalTransactionId: String) async throws -> SubscriptionSnapshot {
        try await processDue()
        return try snapshot(originalTransactionId, notifications: [])
    }

    /// The current state of a transaction (`GET /simulator/transactions/{id}`).
    public func transactionState(_ transactionId: String) async throws -> TransactionSnapshot {
        try await processDue()
        return try transactionSnapshot(transactionId, notifications: [])
    }
}
