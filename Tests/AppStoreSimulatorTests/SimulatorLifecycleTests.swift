import AppStore
import AppStoreSimulator
import DurationUnits
import Foundation
import Testing

/// Each lifecycle event yields the transactions, statuses, receipts and notifications Apple's would.
@Suite struct SimulatorLifecycleTests {
    static let monthly = "com.entitle.demo.premium.monthly"
    static let basic = "com.entitle.demo.basic.monthly"
    static let annual = "com.entitle.demo.premium.annual"
    static let noIntro = #""useIntroductoryOffer":false"#

    /// The notification types and subtypes the receiver got about one original transaction, in order.
    func events(_ sim: SimulatorHarness, _ originalTransactionId: String, expecting count: Int) async throws -> [String] {
        var seen = 0
        var events: [String] = []
        while events.count < count {
            let entries = await sim.inbox.wait(for: "/v2", count: seen + 1)
            try #require(entries.count > seen, "only \(events) arrived")
            for entry in entries[seen...] {
                let body = try JSONDecoder().decode([String: String].self, from: Data(entry.body))
                let payload = try await sim.verifier.verifyNotification(try #require(body["signedPayload"]))
                let transaction = try await sim.verifier.verifyTransaction(try #require(payload.data?.signedTransactionInfo))
                if transaction.originalTransactionId == originalTransactionId {
                    events.append([payload.notificationType?.rawValue, payload.subtype?.rawValue].compactMap { $0 }.joined(separator: "/"))
                }
            }
            seen = entries.count
        }
        return events
    }

    @Test func renewsOnScheduleAndStopsAtTheSandboxLimit() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase(Self.basic, Self.noIntro)
            let api = try await sim.apiClient()
            try await sim.advance(seconds: 301)
            let statuses = try await api.getAllSubscriptionStatuses(transactionId: purchase.transactionId)
            let last = try #require(statuses.data?.first?.lastTransactions?.first)
            #expect(last.status == .active)
            let renewed = try await sim.verifier.verifyTransaction(try #require(last.signedTransactionInfo))
            #expect(renewed.transactionReason == .renewal)
            #expect(renewed.originalTransactionId == purchase.transactionId)
            #expect(renewed.purchaseDate == (try await sim.verifier.verifyTransaction(purchase.signedTransaction)).expiresDate)

            // Sandbox renews twelve times, then lets the subscription expire.
            try await sim.advance(seconds: 300 * 13)
            let snapshot = try await sim.get("/simulator/subscriptions/\(purchase.originalTransactionId)").decode(SubscriptionSnapshot.self)
            #expect(snapshot.transactionIds.count == 13)
            #expect(snapshot.status == .expired)
            #expect(snapshot.autoRenewStatus == false)
            let events = try await events(sim, purchase.originalTransactionId, expecting: 14)
            #expect(events == ["SUBSCRIBED/INITIAL_BUY"] + Array(repeating: "DID_RENEW", count: 12) + ["EXPIRED/VOLUNTARY"])
            // The renewals are in the receipt, as a device would hold it.
            let receipt = try await AppReceiptVerifier(configuration: .init(roots: [sim.server.store.receiptSigning.root]))
                .verify(base64: snapshot.appReceipt)
            #expect(receipt.inAppPurchases.map(\.transactionId) == snapshot.transactionIds)
        }
    }

    @Test func autoRenewOffThenExpiry() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase(Self.basic, Self.noIntro)
            let off = try await sim.subscriptionEvent(purchase.originalTransactionId, "auto-renew-off")
            let info = try await sim.verifier.verifyRenewalInfo(off.signedRenewalInfo)
            #expect(info.autoRenewStatus == .off)
            #expect(try await sim.post("/simulator/subscriptions/\(purchase.originalTransactionId)/auto-renew-off").status == 409)
            let on = try await sim.subscriptionEvent(purchase.originalTransactionId, "auto-renew-on")
            #expect(on.autoRenewStatus)
            _ = try await sim.subscriptionEvent(purchase.originalTransactionId, "auto-renew-off")
            try await sim.advance(seconds: 301)
            let ended = try await sim.get("/simulator/subscriptions/\(purchase.originalTransactionId)").decode(SubscriptionSnapshot.self)
            #expect(ended.status == .expired)
            #expect(try await sim.verifier.verifyRenewalInfo(ended.signedRenewalInfo).expirationIntent == .customerCancelled)
            #expect(
                try await events(sim, purchase.originalTransactionId, expecting: 5) == [
                    "SUBSCRIBED/INITIAL_BUY", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
                    "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_ENABLED",
                    "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED", "EXPIRED/VOLUNTARY",
                ])
        }
    }

    @Test func billingFailureGracePeriodBillingRetryAndRecovery() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase(Self.basic, Self.noIntro)
            let id = purchase.originalTransactionId
            _ = try await sim.subscriptionEvent(id, "billing-failure")
            try await sim.advance(seconds: 301)
            let grace = try await sim.get("/simulator/subscriptions/\(id)").decode(SubscriptionSnapshot.self)
            #expect(grace.status == .billingGracePeriod)
            let graceInfo = try await sim.verifier.verifyRenewalInfo(grace.signedRenewalInfo)
            #expect(graceInfo.isInBillingRetryPeriod == true)
            #expect(graceInfo.expirationIntent == .billingError)
            // The demo app has a 16-day grace period: 16 sandbox days of 40 seconds.
            #expect(graceInfo.gracePeriodExpiresDate?.milliseconds == (grace.expiresDate.milliseconds + 16 * 40_000))

            try await sim.advance(seconds: 16 * 40)
            let retry = try await sim.get("/simulator/subscriptions/\(id)").decode(SubscriptionSnapshot.self)
            #expect(retry.status == .billingRetry)

            let recovered = try await sim.subscriptionEvent(id, "billing-recovery")
            #expect(recovered.status == .active)
            #expect(recovered.transactionIds.count == 2)
            let recovery = try await sim.received(try #require(recovered.notifications.first))
            #expect(recovery.notificationType == .didRenew)
            #expect(recovery.subtype == .billingRecovery)
            #expect(
                try await events(sim, id, expecting: 4) == [
                    "SUBSCRIBED/INITIAL_BUY", "DID_FAIL_TO_RENEW/GRACE_PERIOD", "GRACE_PERIOD_EXPIRED", "DID_RENEW/BILLING_RECOVERY",
                ])
        }
    }

    @Test func billingRetryRunsOutIntoExpiry() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase(Self.basic, Self.noIntro)
            _ = try await sim.subscriptionEvent(purchase.originalTransactionId, "billing-failure")
            try await sim.advance(seconds: 301 + 60 * 40)
            let snapshot = try await sim.get("/simulator/subscriptions/\(purchase.originalTransactionId)").decode(SubscriptionSnapshot.self)
            #expect(snapshot.status == .expired)
            #expect(
                try await events(sim, purchase.originalTransactionId, expecting: 4) == [
                    "SUBSCRIBED/INITIAL_BUY", "DID_FAIL_TO_RENEW/GRACE_PERIOD", "GRACE_PERIOD_EXPIRED", "EXPIRED/BILLING_RETRY",
                ])
        }
    }

    @Test func refundsAndRefundReversal() async throws {
        try await SimulatorHarness.run { sim in
            let credits = try await sim.purchase("com.entitle.demo.credits.100")
            let refunded = try await sim.transactionEvent(credits.transactionId, "refund", #"{"reason":1}"#)
            #expect(refunded.revoked)
            let transaction = try await sim.verifier.verifyTransaction(refunded.signedTransaction)
            #expect(transaction.revocationReason == .appIssue)
            #expect(transaction.revocationType == .refundFull)
            #expect(transaction.revocationDate != nil)
            let notice = try await sim.received(try #require(refunded.notifications.first))
            #expect(notice.notificationType == .refund)
            #expect(try await sim.post("/simulator/transactions/\(credits.transactionId)/refund").status == 409)

            let api = try await sim.apiClient()
            let history = try await api.getRefundHistory(transactionId: credits.transactionId)
            #expect(history.signedTransactions?.count == 1)

            let reversed = try await sim.transactionEvent(credits.transactionId, "refund-reversed")
            #expect(!reversed.revoked)
            #expect(try await sim.verifier.verifyTransaction(reversed.signedTransaction).revocationDate == nil)
            #expect(try await sim.received(try #require(reversed.notifications.first)).notificationType == .refundReversed)
            #expect(try await api.getRefundHistory(transactionId: credits.transactionId).signedTransactions?.isEmpty == true)

            // A refunded subscription ends: status revoked, and back to active when reversed.
            let subscription = try await sim.purchase(Self.basic, Self.noIntro)
            _ = try await sim.transactionEvent(subscription.transactionId, "refund")
            var status = try await api.getAllSubscriptionStatuses(transactionId: subscription.transactionId)
            #expect(status.data?.first?.lastTransactions?.first?.status == .revoked)
            _ = try await sim.transactionEvent(subscription.transactionId, "refund-reversed")
            status = try await api.getAllSubscriptionStatuses(transactionId: subscription.transactionId)
            #expect(status.data?.first?.lastTransactions?.first?.status == .active)

            let declined = try await sim.transactionEvent(subscription.transactionId, "refund-declined")
            #expect(try await sim.received(try #require(declined.notifications.first)).notificationType == .refundDeclined)
        }
    }

    /// Apple's clock moves on between two views of one transaction: with the simulated clock
    /// frozen, each view that differs from the one before (the refund's, its reversal's, a
    /// renewal info after a change) is still signed later than it, so a receiver can order
    /// them; the same view served again keeps its date, as it would in that instant.
    @Test func viewsOfOneTransactionAreSignedInOrderWhileTheClockIsFrozen() async throws {
        try await SimulatorHarness.run { sim in
            #expect(try await sim.post("/simulator/clock/freeze", #"{"frozen":true}"#).status == 200)
            let bought = try await sim.purchase(Self.basic, Self.noIntro)
            let api = try await sim.apiClient()
            func signed(_ jws: String) async throws -> Int64 {
                try #require(try await sim.verifier.verifyTransaction(jws).signedDate?.milliseconds)
            }
            func renewalSigned() async throws -> Int64 {
                let status = try await api.getAllSubscriptionStatuses(transactionId: bought.transactionId)
                let info = try #require(status.data?.first?.lastTransactions?.first?.signedRenewalInfo)
                return try #require(try await sim.verifier.verifyRenewalInfo(info).signedDate?.milliseconds)
            }
            let renewal = try await renewalSigned()
            #expect(try await renewalSigned() == renewal)
            _ = try await sim.subscriptionEvent(bought.originalTransactionId, "auto-renew-off")
            #expect(try await renewalSigned() > renewal, "the changed renewal info is signed later")
            let first = try await signed(bought.signedTransaction)
            let again = try await signed(
                try #require(try await api.getTransactionInfo(transactionId: bought.transactionId).signedTransactionInfo))
            let refunded = try await signed(try await sim.transactionEvent(bought.transactionId, "refund").signedTransaction)
            let reversed = try await signed(try await sim.transactionEvent(bought.transactionId, "refund-reversed").signedTransaction)
            #expect(first == again && again < refunded && refunded < reversed, "\([first, again, refunded, reversed])")
            #expect(reversed - first < 100, "a millisecond apart, not moved off the frozen clock")
        }
    }

    /// The refund control speaks Apple's unit: `revocationPercentage` in milliunits of a
    /// percent, 1 to 99999 for a prorated refund; a full refund says 100000.
    @Test func aProratedRefundIsInMilliunitsOfAPercent() async throws {
        try await SimulatorHarness.run { sim in
            let credits = try await sim.purchase("com.entitle.demo.credits.100")
            for refused in [#"{"percentage":0}"#, #"{"percentage":100000}"#, #"{"percentage":-1}"#] {
                #expect(try await sim.post("/simulator/transactions/\(credits.transactionId)/refund", refused).status == 400, "\(refused)")
            }
            let third = try await sim.transactionEvent(credits.transactionId, "refund", #"{"percentage":33333}"#)
            let prorated = try await sim.verifier.verifyTransaction(third.signedTransaction)
            #expect(prorated.revocationType == .refundProrated)
            #expect(prorated.revocationPercentage == 33333)
            let reversed = try await sim.transactionEvent(credits.transactionId, "refund-reversed")
            let whole = try await sim.verifier.verifyTransaction(reversed.signedTransaction)
            #expect(whole.revocationPercentage == nil && whole.revocationType == nil)
            let full = try await sim.verifier.verifyTransaction(
                try await sim.transactionEvent(credits.transactionId, "refund").signedTransaction)
            #expect(full.revocationType == .refundFull && full.revocationPercentage == 100_000)
            let nearlyAll = try await sim.purchase("com.entitle.demo.credits.100")
            let last = try await sim.transactionEvent(nearlyAll.transactionId, "refund", #"{"percentage":99999}"#)
            #expect(try await sim.verifier.verifyTransaction(last.signedTransaction).revocationPercentage == 99999)
        }
    }

    @Test func familySharingRevocation() async throws {
        try await SimulatorHarness.run { sim in
            let shared = try await sim.purchase(Self.monthly, #""familyShared":true"#)
            let transaction = try await sim.verifier.verifyTransaction(shared.signedTransaction)
            #expect(transaction.inAppOwnershipType == .familyShared)
            let revoked = try await sim.transactionEvent(shared.transactionId, "revoke")
            let after = try await sim.verifier.verifyTransaction(revoked.signedTransaction)
            #expect(after.revocationType == .familyRevoke)
            let notice = try await sim.received(try #require(revoked.notifications.first))
            #expect(notice.notificationType == .revoke)
            #expect(notice.data?.status == .revoked)

            let own = try await sim.purchase(Self.monthly)
            #expect(try await sim.post("/simulator/transactions/\(own.transactionId)/revoke").status == 409)
            #expect(try await sim.post("/simulator/subscriptions/\(own.originalTransactionId)/teleport").status == 404)
            // Only family-shareable products can be shared.
            #expect(
                try await sim.post(
                    "/simulator/purchases", #"{"bundleId":"com.entitle.demo","productId":"\#(Self.basic)","familyShared":true}"#
                ).status == 400)
        }
    }

    @Test func upgradeAtOnceDowngradeAndCrossgradeAtRenewal() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase(Self.basic, Self.noIntro)
            let id = purchase.originalTransactionId
            #expect(try await sim.post("/simulator/subscriptions/\(id)/downgrade", #"{"productId":"\#(Self.monthly)"}"#).status == 400)

            let upgraded = try await sim.subscriptionEvent(id, "upgrade", #"{"productId":"\#(Self.monthly)"}"#)
            #expect(upgraded.productId == Self.monthly)
            #expect(upgraded.transactionIds.count == 2)
            let old = try await sim.verifier.verifyTransaction(
                try await sim.get("/simulator/transactions/\(purchase.transactionId)").decode(TransactionSnapshot.self).signedTransaction)
            #expect(old.isUpgraded == true)
            let new = try await sim.verifier.verifyTransaction(upgraded.signedTransaction)
            #expect(new.productId == Self.monthly)
            #expect(new.originalTransactionId == id)
            #expect(new.transactionReason == .purchase)

            let downgraded = try await sim.subscriptionEvent(id, "downgrade", #"{"productId":"\#(Self.basic)"}"#)
            #expect(downgraded.productId == Self.monthly)
            #expect(downgraded.autoRenewProductId == Self.basic)
            try await sim.advance(seconds: 301)
            let renewed = try await sim.get("/simulator/subscriptions/\(id)").decode(SubscriptionSnapshot.self)
            #expect(renewed.productId == Self.basic)
            #expect(try await sim.verifier.verifyTransaction(renewed.signedTransaction).productId == Self.basic)

            // Premium monthly to premium yearly: same level, another period: at renewal.
            let other = try await sim.purchase(Self.monthly, Self.noIntro)
            let crossed = try await sim.subscriptionEvent(other.originalTransactionId, "crossgrade", #"{"productId":"\#(Self.annual)"}"#)
            #expect(crossed.productId == Self.monthly)
            #expect(crossed.autoRenewProductId == Self.annual)
            #expect(
                try await events(sim, id, expecting: 4) == [
                    "SUBSCRIBED/INITIAL_BUY", "DID_CHANGE_RENEWAL_PREF/UPGRADE", "DID_CHANGE_RENEWAL_PREF/DOWNGRADE", "DID_RENEW",
                ])
            #expect(try await events(sim, other.originalTransactionId, expecting: 2).last == "DID_CHANGE_RENEWAL_PREF/DOWNGRADE")
        }
    }

    @Test func priceIncreaseWithAndWithoutConsent() async throws {
        try await SimulatorHarness.run { sim in
            let declining = try await sim.purchase(Self.basic, Self.noIntro)
            let pending = try await sim.subscriptionEvent(declining.originalTransactionId, "price-increase", #"{"price":6.99}"#)
            let info = try await sim.verifier.verifyRenewalInfo(pending.signedRenewalInfo)
            #expect(info.priceIncreaseStatus == .notResponded)
            #expect(info.renewalPrice == 6990)
            _ = try await sim.subscriptionEvent(declining.originalTransactionId, "price-increase-consent", #"{"accept":false}"#)

            let accepting = try await sim.purchase(Self.basic, Self.noIntro)
            _ = try await sim.subscriptionEvent(accepting.originalTransactionId, "price-increase", #"{"price":6.99}"#)
            let agreed = try await sim.subscriptionEvent(accepting.originalTransactionId, "price-increase-consent", #"{"accept":true}"#)
            #expect(try await sim.verifier.verifyRenewalInfo(agreed.signedRenewalInfo).priceIncreaseStatus == .consented)
            #expect(
                try await sim.post(
                    "/simulator/subscriptions/\(accepting.originalTransactionId)/price-increase-consent", #"{"accept":true}"#
                ).status == 409)

            try await sim.advance(seconds: 301)
            let renewed = try await sim.get("/simulator/subscriptions/\(accepting.originalTransactionId)").decode(SubscriptionSnapshot.self)
            #expect(try await sim.verifier.verifyTransaction(renewed.signedTransaction).price == 6990)
            #expect(
                try await events(sim, declining.originalTransactionId, expecting: 4) == [
                    "SUBSCRIBED/INITIAL_BUY", "PRICE_INCREASE/PENDING", "DID_CHANGE_RENEWAL_STATUS/AUTO_RENEW_DISABLED",
                    "EXPIRED/PRICE_INCREASE",
                ])
            #expect(
                try await events(sim, accepting.originalTransactionId, expecting: 4) == [
                    "SUBSCRIBED/INITIAL_BUY", "PRICE_INCREASE/PENDING", "PRICE_INCREASE/ACCEPTED", "DID_RENEW",
                ])

            // An increase that needs no consent: Apple's 1, "notified without needing consent".
            let told = try await sim.purchase(Self.basic, Self.noIntro)
            let notified = try await sim.subscriptionEvent(
                told.originalTransactionId, "price-increase", #"{"price":6.99,"requiresConsent":false}"#)
            let notice = try await sim.verifier.verifyRenewalInfo(notified.signedRenewalInfo)
            #expect(notice.priceIncreaseStatus == .consented && notice.renewalPrice == 6990)
        }
    }

    @Test func consumptionRequestAndRenewalExtensionThroughTheServerAPI() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            let credits = try await sim.purchase("com.entitle.demo.credits.100")
            let information = ConsumptionRequest(
                customerConsented: true, deliveryStatus: .delivered, sampleContentProvided: false, consumptionPercentage: 50_000)
            // Apple only takes consumption information it asked for.
            await #expect(throws: AppStoreError.self) {
                try await api.sendConsumptionInformation(transactionId: credits.transactionId, information)
            }
            let asked = try await sim.transactionEvent(credits.transactionId, "consumption-request", #"{"consumptionReason":"LEGAL"}"#)
            let request = try await sim.received(try #require(asked.notifications.first))
            #expect(request.notificationType == .consumptionRequest)
            #expect(request.data?.consumptionRequestReason == .legal)
            try await api.sendConsumptionInformation(transactionId: credits.transactionId, information)
            let recorded = try await sim.get("/simulator/transactions/\(credits.transactionId)").decode(TransactionSnapshot.self)
            #expect(recorded.consumption == information)

            let subscription = try await sim.purchase(Self.basic, Self.noIntro)
            let before = try await sim.verifier.verifyTransaction(subscription.signedTransaction).expiresDate?.milliseconds ?? 0
            let extend = ExtendRenewalDateRequest(extendByDays: 3, extendReasonCode: 3, requestIdentifier: UUID().uuidString)
            let response = try await api.extendSubscriptionRenewalDate(originalTransactionId: subscription.originalTransactionId, extend)
            #expect(response.success == true)
            #expect(response.effectiveDate?.milliseconds == before + 3 * 40_000)
            // A retried request (same identifier) extends once.
            _ = try await api.extendSubscriptionRenewalDate(originalTransactionId: subscription.originalTransactionId, extend)
            let snapshot = try await sim.get("/simulator/subscriptions/\(subscription.originalTransactionId)").decode(
                SubscriptionSnapshot.self)
            #expect(snapshot.expiresDate.milliseconds == before + 3 * 40_000)
            #expect(
                try await events(sim, subscription.originalTransactionId, expecting: 2) == ["SUBSCRIBED/INITIAL_BUY", "RENEWAL_EXTENDED"])
            await #expect(throws: AppStoreError.self) {
                try await api.extendSubscriptionRenewalDate(
                    originalTransactionId: subscription.originalTransactionId,
                    ExtendRenewalDateRequest(extendByDays: 91, extendReasonCode: 0, requestIdentifier: "x"))
            }
        }
    }
}
