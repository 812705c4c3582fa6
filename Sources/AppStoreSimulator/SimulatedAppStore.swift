import AppStore
import Crypto
import Foundation

/// The simulated App Store's state and rules: what customers bought, how subscriptions
/// renew, fail, recover and end, and what Apple signs and sends about it.
///
/// Every change runs on this actor, in the order requests arrive; time comes from
/// `clock`, and `processDue()` applies whatever the clock has reached (renewals, grace and
/// billing-retry ends) in time order.
public actor SimulatedAppStore {
    nonisolated public let catalog: SimulatorCatalog
    nonisolated public let clock: SimulatedClock
    nonisolated public let signing: SigningAuthority
    nonisolated public let receiptSigning: ReceiptSigningAuthority
    nonisolated public let notifications: NotificationDispatcher
    /// Sandbox stops renewing a subscription after this many renewals, as Apple's does.
    nonisolated public let sandboxRenewalLimit: Int

    var transactions: [String: SimulatedTransaction] = [:]
    var subscriptions: [String: SimulatedSubscription] = [:]
    /// Transaction ids per account, in purchase order.
    var accountTransactions: [String: [String]] = [:]
    var orders: [String: [String]] = [:]
    /// Original transaction ids of subscriptions per account, so lookups never scan them all.
    var accountSubscriptions: [String: Set<String>] = [:]
    /// Subscriptions by when the scheduler must next look at them.
    var due = DueQueue()
    /// While the scheduler applies what fell due: when it did (history is dated by it).
    var happeningAt: Date?
    /// When what is being signed happens: a due date the scheduler reached (the clock may
    /// have jumped past it), else now. Apple signs as things happen.
    var signingDate: Date { happeningAt ?? clock.now }
    /// The last view of each transaction (by id) and of each subscription's renewal info (by
    /// `renewal:` and its original id), unsigned, and when it was signed: see `signedAt(_:_:)`.
    private var lastSigned: [String: (view: AnyHashable, at: AppleTimestamp)] = [:]
    private var nextTransactionId: Int64
    private var nextWebOrderLineItemId: Int64

    public init(
        catalog: SimulatorCatalog, clock: SimulatedClock = SimulatedClock(), signing: SigningAuthority,
        receiptSigning: ReceiptSigningAuthority, notifications: NotificationDispatcher, sandboxRenewalLimit: Int = 12
    ) {
        self.catalog = catalog
        self.clock = clock
        self.signing = signing
        self.receiptSigning = receiptSigning
        self.notifications = notifications
        self.sandboxRenewalLimit = sandboxRenewalLimit
        // Ids start from the wall clock, so a restarted simulator never repeats one that a
        // store which outlived it (Redis) still remembers.
        let base = Int64(Date().timeIntervalSince1970 * 1000) * 100
        nextTransactionId = 2_000_000_000_000_000 + base % 1_000_000_000_000_000
        nextWebOrderLineItemId = 2_000_000_000_000_000 + base % 1_000_000_000_000_000
    }

    // MARK: Purchases

    /// A customer buys a product: a signed transaction, the app receipt, and the
    /// notification Apple sends for it.
    public func purchase(_ request: PurchaseRequest) async throws -> PurchaseResult {
        try await processDue()
        guard let app = catalog.app(request.bundleId) else {
            throw SimulatorError(.notFound, "no app with bundle id \(request.bundleId)")
        }
        guard let product = catalog.product(request.productId), product.bundleId == app.bundleId else {
            throw SimulatorError(.notFound, "app \(app.bundleId) sells no product \(request.productId)")
        }
        let environment = request.environment ?? .sandbox
        guard environment == .sandbox || environment == .production else {
            throw SimulatorError(.invalidRequest, "environment must be Sandbox or Production")
        }
        let quantity = request.quantity ?? 1
        guard (1...10).contains(quantity), quantity == 1 || product.type == .consumable else {
            throw SimulatorError(.invalidRequest, "quantity must be 1, or 1 to 10 for consumables")
        }
        if let token = request.appAccountToken, UUID(uuidString: token) == nil {
            throw SimulatorError(.invalidRequest, "appAccountToken must be a UUID")
        }
        let storefront = request.storefront ?? "USA"
        guard let price = product.price(in: storefront) else { throw SimulatorError(.invalidRequest, "no price") }
        let monthly = request.billingPlanType == .monthly
        if let plan = request.billingPlanType, plan != .monthly, plan != .billedUpfront {
            throw SimulatorError(.invalidRequest, "billingPlanType must be MONTHLY or BILLED_UPFRONT")
        }
        guard !monthly || (product.type == .autoRenewable && product.period == SubscriptionPeriod(count: 1, unit: .year)) else {
            throw SimulatorError(.invalidRequest, "a MONTHLY plan with a 12-month commitment is sold for yearly subscriptions only")
        }
        guard request.familyShared != true || product.familyShareable == true else {
            throw SimulatorError(.invalidRequest, "\(product.productId) is not family shareable")
        }
        let account = request.appleAccount ?? UUID().uuidString
        let now = clock.now
        let owned = (accountTransactions[account] ?? []).compactMap { transactions[$0] }

        let transactionId = newTransactionId()
        var transaction = JWSTransaction()
        transaction.transactionId = transactionId
        transaction.originalTransactionId = transactionId
        transaction.bundleId = app.bundleId
        transaction.productId = product.productId
        transaction.purchaseDate = AppleTimestamp(now)
        transaction.originalPurchaseDate = AppleTimestamp(now)
        transaction.quantity = quantity
        transaction.type = product.type
        transaction.appAccountToken = request.appAccountToken?.lowercased()
        transaction.inAppOwnershipType = request.familyShared == true ? .familyShared : .purchased
        transaction.environment = environment
        transaction.storefront = storefront
        transaction.storefrontId = SimulatorCatalog.storefrontIds[storefront] ?? "143441"
        transaction.transactionReason = .purchase
        transaction.currency = price.currency
        transaction.price = price.milliunits * Int64(quantity)
        transaction.appTransactionId = Self.appTransactionId(account: account, bundleId: app.bundleId)
        var record = SimulatedTransaction(transaction: transaction, account: account, orderId: Self.newOrderId())

        var event: (NotificationType, NotificationSubtype?, String?)
        if product.type == .autoRenewable, let groupId = product.subscriptionGroup, let period = product.period {
            // The live one when there is one (a migrated subscription leaves its old chain expired).
            let inGroup = subscriptions(of: account).filter {
                $0.groupId == groupId && $0.bundleId == app.bundleId && $0.environment == environment
            }
            let previous =
                inGroup.first { $0.state != .expired && $0.state != .revoked }
                ?? inGroup.max { $0.originalPurchaseDate < $1.originalPurchaseDate }
            if let previous, previous.state != .expired, previous.state != .revoked {
                throw SimulatorError(
                    .conflict,
                    "account \(account) already subscribes to group \(groupId) (\(previous.originalTransactionId)); upgrade, downgrade or crossgrade it"
                )
            }
            var offer: SimulatedSubscription.RunningOffer?
            if monthly {
                // A commitment plan is billed at its own price, without offers.
                guard request.offerCode == nil else { throw SimulatorError(.invalidRequest, "a MONTHLY plan takes no offer code") }
            } else if let code = request.offerCode {
                guard let codeOffer = product.offerCodes?.first(where: { $0.id == code }) else {
                    throw SimulatorError(.invalidRequest, "\(product.productId) has no offer code \(code)")
                }
                offer = Self.running(codeOffer, type: .offerCode, storefront: storefront)
            } else if previous == nil, request.useIntroductoryOffer ?? true, let intro = product.introductoryOffer {
                // Introductory offers go to customers new to the group.
                offer = Self.running(intro, type: .introductory, storefront: storefront)
            }
            let originalTransactionId = previous?.originalTransactionId ?? transactionId
            let originalPurchaseDate = previous?.originalPurchaseDate ?? now
            transaction.originalTransactionId = originalTransactionId
            transaction.originalPurchaseDate = AppleTimestamp(originalPurchaseDate)
            var subscription = SimulatedSubscription(
                originalTransactionId: originalTransactionId, account: account, bundleId: app.bundleId,
                environment: environment, groupId: groupId, productId: product.productId, autoRenewProductId: product.productId,
                expiresDate: now, originalPurchaseDate: originalPurchaseDate, recentStartDate: now,
                appAccountToken: transaction.appAccountToken, storefront: storefront, currency: price.currency,
                ownership: transaction.inAppOwnershipType ?? .purchased)
            subscription.offer = offer
            subscription.transactionIds = previous?.transactionIds ?? []
            // A resubscription continues the subscription's record.
            subscription.history = previous?.history ?? []
            record.transaction = transaction
            if monthly {
                subscription.commitment = SimulatedSubscription.Commitment(
                    expiresDate: period.end(from: now, environment: environment), monthlyPrice: Self.monthlyPrice(yearly: price.milliunits))
            }
            record = fillSubscriptionPeriod(record, subscription: &subscription, start: now, period: period, regularPrice: price.milliunits)
            save(subscription)
            event = (.subscribed, previous == nil ? .initialBuy : .resubscribe, previous == nil ? "INITIAL_BUY" : "INTERACTIVE_RENEWAL")
        } else {
            if let code = request.offerCode {
                guard let offer = product.oneTimeOfferCodes?.first(where: { $0.id == code }) else {
                    throw SimulatorError(.invalidRequest, "\(product.productId) has no offer code \(code)")
                }
                let offerPrice = offer.prices.first { $0.storefront == storefront } ?? offer.prices.first
                transaction.offerType = .offerCode
                transaction.offerIdentifier = offer.id
                transaction.offerDiscountType = .oneTime
                transaction.price = (offerPrice?.milliunits ?? 0) * Int64(quantity)
                transaction.currency = offerPrice?.currency ?? transaction.currency
            }
            if product.type == .nonConsumable,
                owned.contains(where: { $0.transaction.productId == product.productId && !$0.isRevoked && $0.environment == environment })
            {
                throw SimulatorError(.conflict, "account \(account) already owns \(product.productId)")
            }
            record.transaction = transaction
            event = (.oneTimeCharge, nil, nil)
        }
        store(record)
        let uuid = try await notify(event.0, event.1, v1: event.2, transactionId: record.id)
        let subscription = subscriptions[record.transaction.originalTransactionId ?? ""]
        return PurchaseResult(
            transactionId: record.id, originalTransactionId: record.transaction.originalTransactionId ?? record.id,
            signedTransaction: try signedTransaction(record.id),
            appReceipt: try appReceipt(account: account, bundleId: app.bundleId, environment: environment, including: record.id),
            signedRenewalInfo: try subscription.map { try signedRenewalInfo($0) }, appleAccount: account, orderId: record.orderId,
            notifications: [uuid])
    }

    /// Sets a subscription transaction's period and price from the running offer or the
    /// regular terms, and consumes one offer period.
    func fillSubscriptionPeriod(
        _ record: SimulatedTransaction, subscription: inout SimulatedSubscription, start: Date, period: SubscriptionPeriod,
        regularPrice: Int64
    ) -> SimulatedTransaction {
        var record = record
        var transaction = record.transaction
        transaction.webOrderLineItemId = newWebOrderLineItemId()
        transaction.subscriptionGroupIdentifier = subscription.groupId
        var end = period.end(from: start, environment: subscription.environment)
        var price = subscription.priceIncrease.flatMap { $0.consented != false ? $0.price : nil } ?? regularPrice
        if let commitment = subscription.commitment {
            // Month by month; each transaction says which period of the commitment it pays.
            end = SubscriptionPeriod(count: 1, unit: .month).end(from: start, environment: subscription.environment)
            price = commitment.monthlyPrice
            transaction.billingPlanType = .monthly
            var info = TransactionCommitmentInfo()
            info.billingPeriodNumber = commitment.period
            info.totalBillingPeriods = commitment.periods
            info.commitmentExpiresDate = AppleTimestamp(commitment.expiresDate)
            let (total, overflow) = commitment.monthlyPrice.multipliedReportingOverflow(by: Int64(commitment.periods))
            info.commitmentPrice = overflow ? nil : total
            transaction.commitmentInfo = info
        }
        if var offer = subscription.offer, offer.remainingPeriods > 0 {
            transaction.offerType = offer.offerType
            transaction.offerDiscountType = offer.discountType
            transaction.offerIdentifier = offer.identifier
            transaction.offerPeriod = offer.period.description
            price = offer.price
            if offer.discountType == .payAsYouGo {
                end = offer.period.end(from: start, environment: subscription.environment)
                offer.remainingPeriods -= 1
            } else {
                // Free trials and pay-up-front offers are one transaction for the whole offer.
                end = start
                for _ in 0..<offer.remainingPeriods { end = offer.period.end(from: end, environment: subscription.environment) }
                offer.remainingPeriods = 0
            }
            record.isTrialPeriod = offer.discountType == .freeTrial
            record.isInIntroOfferPeriod = offer.offerType == .introductory && offer.discountType != .freeTrial
            subscription.offer = offer.remainingPeriods > 0 ? offer : nil
        }
        transaction.price = price
        transaction.expiresDate = AppleTimestamp(end)
        record.transaction = transaction
        subscription.expiresDate = end
        subscription.transactionIds.append(record.id)
        return record
    }

    static func running(_ offer: SimulatorCatalog.Offer, type: OfferType, storefront: String) -> SimulatedSubscription.RunningOffer {
        let price = offer.prices.flatMap { prices in prices.first { $0.storefront == storefront } ?? prices.first }?.milliunits ?? 0
        return .init(
            offerType: type, discountType: offer.type, identifier: type == .offerCode ? offer.id : nil, period: offer.period,
            remainingPeriods: max(1, offer.periodCount ?? 1), price: offer.type == .freeTrial ? 0 : price)
    }

    func store(_ record: SimulatedTransaction) {
        if transactions[record.id] == nil {
            accountTransactions[record.account, default: []].append(record.id)
            orders[record.orderId, default: []].append(record.id)
        }
        transactions[record.id] = record
    }

    /// Stores a subscription and tells the scheduler when it is next due; a change of state,
    /// transaction or renewal preference goes into its history, dated when it happened (a due
    /// date the scheduler reached, or now).
    func save(_ subscription: SimulatedSubscription) {
        var subscription = subscription
        let entry = SubscriptionHistoryEntry(
            at: AppleTimestamp(happeningAt ?? clock.now), status: subscription.state.status,
            transactionId: subscription.latestTransactionId, autoRenewStatus: subscription.autoRenew,
            autoRenewProductId: subscription.autoRenewProductId, expirationIntent: subscription.expirationIntent)
        if let last = subscription.history.last {
            var same = last
            same.at = entry.at
            if same != entry { subscription.history.append(entry) }
        } else {
            subscription.history.append(entry)
        }
        subscriptions[subscription.originalTransactionId] = subscription
        accountSubscriptions[subscription.account, default: []].insert(subscription.originalTransactionId)
        if let next = subscription.nextDue { due.push(next, subscription.originalTransactionId) }
    }

    /// The account's subscriptions, in original-transaction-id order.
    func subscriptions(of account: String) -> [SimulatedSubscription] {
        (accountSubscriptions[account] ?? []).sorted().compactMap { subscriptions[$0] }
    }

    func newTransactionId() -> String {
        nextTransactionId += 1
        return String(nextTransactionId)
    }

    func newWebOrderLineItemId() -> String {
        nextWebOrderLineItemId += 1
        return String(nextWebOrderLineItemId)
    }

    /// Order ids look like Apple's: ten letters and digits.
    static func newOrderId() -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789")
        return String((0..<10).map { _ in alphabet[Int.random(in: 0..<alphabet.count)] })
    }

    // MARK: Signing

    /// When Apple signs `view` of `key` now. Apple's clock moves on between two views of one
    /// transaction, so a view that differs from the one before is signed at least a
    /// millisecond after it, even while the simulated clock is frozen: receivers order views
    /// by `signedDate`, and two views signed in the same millisecond (a purchase and its
    /// refund) have no order. The same view again, on a frozen clock, keeps its date.
    func signedAt(_ key: String, _ view: AnyHashable) -> AppleTimestamp {
        var stamp = AppleTimestamp(signingDate)
        if let last = lastSigned[key], stamp <= last.at {
            stamp = last.view == view ? last.at : AppleTimestamp(milliseconds: last.at.milliseconds + 1)
        }
        lastSigned[key] = (view, stamp)
        return stamp
    }

    /// The transaction as Apple serves it now: current revocation state, fresh `signedDate`.
    func signedTransaction(_ id: String) throws -> String {
        guard var transaction = transactions[id]?.transaction else { throw SimulatorError(.notFound, "no transaction \(id)") }
        transaction.signedDate = nil
        transaction.signedDate = signedAt(id, transaction)
        return try signing.sign(transaction)
    }

    func renewalInfo(_ subscription: SimulatedSubscription) -> JWSRenewalInfo {
        var info = JWSRenewalInfo()
        info.originalTransactionId = subscription.originalTransactionId
        info.productId = subscription.productId
        info.autoRenewProductId = subscription.autoRenewProductId
        info.autoRenewStatus = subscription.autoRenew ? .on : .off
        info.isInBillingRetryPeriod = subscription.state == .billingRetry || subscription.state == .gracePeriod
        info.gracePeriodExpiresDate = subscription.state == .gracePeriod ? subscription.gracePeriodExpires.map(AppleTimestamp.init) : nil
        info.expirationIntent =
            subscription.state == .expired || subscription.state == .billingRetry
                || subscription.state == .gracePeriod ? subscription.expirationIntent : nil
        if let increase = subscription.priceIncrease {
            // Apple's 1 is "consented, or notified of an increase that needs no consent".
            info.priceIncreaseStatus = increase.consented == true || !increase.requiresConsent ? .consented : .notResponded
        }
        info.environment = subscription.environment
        info.recentSubscriptionStartDate = AppleTimestamp(subscription.recentStartDate)
        info.renewalDate =
            subscription.state == .active || subscription.state == .gracePeriod ? AppleTimestamp(subscription.expiresDate) : nil
        let regular = catalog.product(subscription.autoRenewProductId)?.price(in: subscription.storefront)?.milliunits
        info.renewalPrice = subscription.offer?.price ?? subscription.priceIncrease?.price ?? regular
        info.currency = subscription.currency
        if let offer = subscription.offer {
            info.offerType = offer.offerType
            info.offerDiscountType = offer.discountType
            info.offerIdentifier = offer.identifier
            info.offerPeriod = offer.period.description
        }
        if subscription.state == .expired, let winBack = catalog.product(subscription.productId)?.winBackOfferIds, !winBack.isEmpty {
            info.eligibleWinBackOfferIds = winBack
        }
        info.appAccountToken = subscription.appAccountToken
        info.appTransactionId = Self.appTransactionId(account: subscription.account, bundleId: subscription.bundleId)
        if let commitment = subscription.commitment {
            info.renewalBillingPlanType = .monthly
            info.renewalPrice = commitment.monthlyPrice
            var renewal = RenewalCommitmentInfo()
            renewal.commitmentAutoRenewProductId = subscription.autoRenewProductId
            renewal.commitmentAutoRenewStatus = commitment.renews ? .on : .off
            renewal.commitmentRenewalBillingPlanType = .monthly
            renewal.commitmentRenewalDate = AppleTimestamp(commitment.expiresDate)
            renewal.commitmentRenewalPrice = commitment.monthlyPrice
            info.commitmentInfo = renewal
        }
        info.signedDate = signedAt("renewal:" + subscription.originalTransactionId, info)
        return info
    }

    /// A yearly price as a monthly commitment price: a twelfth, up to the next whole cent.
    static func monthlyPrice(yearly: Int64) -> Int64 {
        let twelfth = yearly / 12 + (yearly % 12 == 0 ? 0 : 1)
        return (twelfth + 9) / 10 * 10
    }

    func signedRenewalInfo(_ subscription: SimulatedSubscription) throws -> String {
        try signing.sign(renewalInfo(subscription))
    }

    // MARK: Receipts

    /// The account's app receipt as a device would hold it: every non-consumable and
    /// subscription transaction, plus the consumable just bought (finished consumables
    /// leave receipts).
    func appReceipt(account: String, bundleId: String, environment: AppStoreEnvironment, including: String? = nil) throws -> String {
        let app = catalog.app(bundleId)
        var receipt = AppReceipt()
        receipt.receiptType = environment == .production ? "Production" : "ProductionSandbox"
        receipt.appItemId = environment == .production ? app?.appAppleId : 0
        receipt.bundleId = bundleId
        receipt.applicationVersion = app?.bundleVersion ?? "1"
        receipt.originalApplicationVersion = receipt.applicationVersion
        receipt.creationDate = AppleTimestamp(clock.now)
        receipt.opaqueValue = Array(SHA256.hash(data: Data(account.utf8)).prefix(16))
        receipt.inAppPurchases = receiptTransactions(account: account, bundleId: bundleId, environment: environment, including: including)
            .map(Self.receiptPurchase)
        let payload = AppReceiptEncoder.encode(receipt)
        return Data(try receiptSigning.sign(content: payload)).base64EncodedString()
    }

    func receiptTransactions(
        account: String, bundleId: String, environment: AppStoreEnvironment, including: String? = nil
    )
        -> [SimulatedTransaction]
    {
        (accountTransactions[account] ?? []).compactMap { transactions[$0] }.filter {
            $0.transaction.bundleId == bundleId && $0.environment == environment
                && ($0.transaction.type != .consumable || $0.id == including)
        }
    }

    static func receiptPurchase(_ record: SimulatedTransaction) -> ReceiptInAppPurchase {
        let transaction = record.transaction
        var purchase = ReceiptInAppPurchase()
        purchase.quantity = transaction.quantity
        purchase.productId = transaction.productId
        purchase.transactionId = transaction.transactionId
        purchase.originalTransactionId = transaction.originalTransactionId
        purchase.purchaseDate = transaction.purchaseDate
        purchase.originalPurchaseDate = transaction.originalPurchaseDate
        purchase.expiresDate = transaction.expiresDate
        purchase.webOrderLineItemId = transaction.webOrderLineItemId.flatMap { Int64($0) }
        purchase.cancellationDate = transaction.revocationDate
        if transaction.type == .autoRenewable {
            purchase.isTrialPeriod = record.isTrialPeriod
            purchase.isInIntroOfferPeriod = record.isInIntroOfferPeriod
        }
        return purchase
    }

    /// The account that owns the receipt: found through the transactions it lists.
    func account(ofReceipt receipt: AppReceipt) -> String? {
        receipt.inAppPurchases.lazy.compactMap { $0.transactionId.flatMap { self.transactions[$0]?.account } }.first
    }

    // MARK: Notifications

    /// Signs and hands over a V2 notification (and its V1 twin when `v1` names a type) for
    /// the transaction; returns its `notificationUUID`.
    @discardableResult
    func notify(
        _ type: NotificationType, _ subtype: NotificationSubtype?, v1: String?, transactionId: String,
        consumptionReason: ConsumptionRequestReason? = nil
    ) async throws -> String {
        guard let record = transactions[transactionId] else { throw SimulatorError(.notFound, "no transaction \(transactionId)") }
        let app = catalog.app(record.transaction.bundleId ?? "")
        let subscription = record.transaction.type == .autoRenewable ? subscriptions[record.transaction.originalTransactionId ?? ""] : nil
        var data = NotificationData()
        data.environment = record.environment
        data.appAppleId = app?.appAppleId
        data.bundleId = app?.bundleId
        data.bundleVersion = app?.bundleVersion
        data.signedTransactionInfo = try signedTransaction(transactionId)
        data.signedRenewalInfo = try subscription.map { try signedRenewalInfo($0) }
        data.status = subscription?.state.status
        data.consumptionRequestReason = consumptionReason
        var payload = NotificationPayload()
        payload.notificationType = type
        payload.subtype = subtype
        let uuid = UUID().uuidString.lowercased()
        payload.notificationUUID = uuid
        payload.data = data
        payload.version = "2.0"
        payload.signedDate = AppleTimestamp(signingDate)
        // A V1 body holds a freshly signed receipt: only build it when someone listens.
        let v1Body = await notifications.sendsV1 ? try v1.map { try v1Notification(type: $0, record: record) } : nil
        await notifications.send(
            OutgoingNotification(
                uuid: uuid, type: type, subtype: subtype, signedPayload: try signing.sign(payload), v1Body: v1Body,
                transactionId: transactionId, bundleId: record.transaction.bundleId ?? "", environment: record.environment,
                createdAt: clock.now))
        return uuid
    }
}
