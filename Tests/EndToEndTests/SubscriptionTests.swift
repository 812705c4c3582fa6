import Entitlements
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// Auto-renewable subscriptions kept true by V2 notifications and renewal checks.
@Suite struct SubscriptionTests {
    @Test(.timeLimit(.minutes(3))) func aSubscriptionFollowsRenewalsGraceBillingRetryAndRecovery() async throws {
        try await EntitleStack.run("lifecycle") { stack in
            try await stack.startWorker()
            // Bought with the WELCOME50 offer code; the app posts only the transaction id (App Store Server API road).
            let bought = try await stack.purchase("premium.monthly", #""offerCode":"WELCOME50""#)
            let original = try #require(bought["originalTransactionId"] as? String)
            let result = try await stack.receipt([
                "customer": "viewer@example.com", "transactionId": try #require(bought["transactionId"] as? String),
                "couponCode": "WELCOME50", "offerId": "premium",
            ])
            #expect(result["accessGranted"] as? Bool == true)
            #expect(result["entitlements"] as? [String] == ["hd", "premium"])
            let subscription = try #require(result["subscription"] as? [String: Any])
            #expect(subscription["status"] as? String == "active")
            #expect(subscription["autoRenew"] as? Bool == true, "renewal info came from Get All Subscription Statuses")
            #expect(subscription["offerIdentifier"] as? String == "WELCOME50")
            #expect((result["coupon"] as? [String: Any])?["applied"] as? Bool == true, "the coupon matches Apple's offer code")

            // Renewed: DID_RENEW moves the subscription to the new transaction.
            let firstTransaction = try #require(result["transactionId"] as? String)
            _ = try await stack.simulatorCall("/simulator/subscriptions/\(original)/renew", "{}")
            try await stack.waitForCustomer("viewer@example.com", "renewed") {
                $0.subscriptions[original].map { $0.latestTransactionId != firstTransaction } ?? false
            }
            // Auto-renew off, then on.
            _ = try await stack.simulatorCall("/simulator/subscriptions/\(original)/auto-renew-off", "{}")
            try await stack.waitForCustomer("viewer@example.com", "auto-renew off") { $0.subscriptions[original]?.autoRenew == false }
            _ = try await stack.simulatorCall("/simulator/subscriptions/\(original)/auto-renew-on", "{}")
            try await stack.waitForCustomer("viewer@example.com", "auto-renew on") { $0.subscriptions[original]?.autoRenew == true }

            // Billing fails at the next renewal: the grace period keeps access (16 sandbox days).
            _ = try await stack.simulatorCall("/simulator/subscriptions/\(original)/billing-failure", "{}")
            try await stack.advance(seconds: 300)
            try await stack.waitForCustomer("viewer@example.com", "in grace period") { $0.subscriptions[original]?.status == .gracePeriod }
            var state = try await stack.customer("viewer@example.com")
            let now = try await Self.simulatorNow(stack)
            #expect(state.entitlements(at: now) == ["hd", "premium"])
            // The grace period ends: billing retry, without access.
            try await stack.advance(seconds: 16 * 40 + 5)
            try await stack.waitForCustomer("viewer@example.com", "in billing retry") {
                $0.subscriptions[original]?.status == .billingRetry
            }
            state = try await stack.customer("viewer@example.com")
            #expect(state.entitlements(at: try await Self.simulatorNow(stack)).isEmpty)
            // Billing works again: a new period starts.
            _ = try await stack.simulatorCall("/simulator/subscriptions/\(original)/billing-recovery", "{}")
            try await stack.waitForCustomer("viewer@example.com", "recovered") { $0.subscriptions[original]?.status == .active }
            state = try await stack.customer("viewer@example.com")
            #expect(state.entitlements(at: try await Self.simulatorNow(stack)) == ["hd", "premium"])

            // Every notification job succeeded; renewals and the expiration reached the webhook.
            let jobs = try await stack.notificationJobs()
            #expect(jobs.allSatisfy { $0.record.status == .succeeded }, "\(jobs.map { $0.record.lastError ?? "" })")
            let deliveries = await stack.receiver.webhooks.wait(for: "/webhook", count: 3)
            let types = Set(
                deliveries.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any])?["type"] as? String })
            #expect(types.isSuperset(of: ["purchase", "renewal", "expiration"]), "\(types)")
        }
    }

    @Test(.timeLimit(.minutes(3))) func upgradesActAtOnceDowngradesAtRenewalAndRenewalChecksFindWhatNotificationsMissed() async throws {
        try await EntitleStack.run("grades") { stack in
            try await stack.startWorker()
            let bought = try await stack.purchase("basic.monthly")
            let original = try #require(bought["originalTransactionId"] as? String)
            let first = try await stack.receipt([
                "customer": "grader@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            #expect(first["entitlements"] as? [String] == ["basic"])

            // Upgrade: at once.
            _ = try await stack.simulatorCall(
                "/simulator/subscriptions/\(original)/upgrade", #"{"productId":"com.entitle.demo.premium.monthly"}"#)
            try await stack.waitForCustomer("grader@example.com", "upgraded") {
                $0.subscriptions[original]?.productId == "com.entitle.demo.premium.monthly"
            }
            var now = try await Self.simulatorNow(stack)
            #expect(try await stack.customer("grader@example.com").entitlements(at: now) == ["hd", "premium"])

            // Downgrade: the renewal preference changes, access does not until the renewal.
            _ = try await stack.simulatorCall(
                "/simulator/subscriptions/\(original)/downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            try await stack.waitForCustomer("grader@example.com", "downgrade pending") {
                $0.subscriptions[original]?.autoRenewProductId == "com.entitle.demo.basic.monthly"
            }
            #expect(
                try await stack.customer("grader@example.com").entitlements(at: try await Self.simulatorNow(stack)) == ["hd", "premium"])

            // Notifications stop reaching Entitle (those already in are finished first: a V1 job
            // verifies its receipt when it runs, and would see the renewal); the renewal
            // happens; the renewal check finds it.
            await stack.receiver.set(v2: false, v1: false)
            _ = try await stack.notificationJobs()
            let before = try await stack.customer("grader@example.com").subscriptions[original]
            // Apple is unreachable once: the check is retried and the entitlement stays meanwhile.
            _ = try await stack.simulatorCall("/simulator/faults", #"{"target":"serverAPI","status":503,"count":1}"#)
            try await stack.advance(seconds: 300)
            try await stack.waitForCustomer("grader@example.com", "renewed into basic by the renewal check", timeout: .seconds(60)) {
                $0.subscriptions[original]?.productId == "com.entitle.demo.basic.monthly"
                    && $0.subscriptions[original]?.expiresDate != before?.expiresDate
            }
            now = try await Self.simulatorNow(stack)
            let state = try await stack.customer("grader@example.com")
            #expect(state.entitlements(at: now) == ["basic"])
            #expect(state.subscriptions[original]?.status == .active)
            // Only a renewal check can have done it; its ack is batched, so the counter may trail the write.
            let stats = "\(stack.prefix):{default}:stats"
            try await eventually("the renewal check's success to be counted") {
                Int(try await stack.jobQueue.redis.send(["HGET", stats, "succeeded:renewal-check"]).string ?? "0") ?? 0 >= 1
            }
            let retried = Int(try await stack.jobQueue.redis.send(["HGET", stats, "retried:renewal-check"]).string ?? "0") ?? 0
            #expect(retried >= 1, "the 503 made the check retry")
            // The next check is scheduled for the new expiry (indexed right after the write).
            try await eventually("the next check in the renewal index") {
                let due = try await stack.jobQueue.redis.send(["ZSCORE", "\(stack.prefix):ent:renewals", "demo/\(original)"]).string
                return due.flatMap(Double.init).map { $0 > now.timeIntervalSince1970 * 1000 } ?? false
            }
        }
    }

    static func simulatorNow(_ stack: EntitleStack) async throws -> Date {
        let clock = try await stack.simulatorCall("/simulator/clock")
        return Date(timeIntervalSince1970: (clock["now"] as? Double ?? 0) / 1000)
    }
}
