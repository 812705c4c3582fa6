import Foundation
import RedisTestSupport
import Testing

/// A yearly subscription bought as a monthly plan with a 12-month commitment (API 1.21):
/// bought, renewed month by month, its commitment's renewal turned off, and read at each
/// step through the API, while the simulator bills it and its notifications reach the worker.
@Suite struct CommitmentPlanFlowTests {
    @Test(.timeLimit(.minutes(6))) func aCommitmentPlanIsBilledMonthlyAndEndsAfterTwelveMonthsOnceItsRenewalIsOff() async throws {
        try await APIStack.run("commitment", worker: true, notify: ["demo"]) { api in
            let ann = "ann-commitment@example.com"
            let bought = try await api.buy("premium.annual", extra: ["environment": "Production", "billingPlanType": "MONTHLY"])
            let original = try #require(bought["originalTransactionId"] as? String)
            let claimed = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")

            /// The subscription as the API shows it now.
            func read() async throws -> [String: Any] {
                let subscriptions = try await api.customer(ann)["subscriptions"] as? [[String: Any]] ?? []
                return try #require(subscriptions.first { $0["originalTransactionId"] as? String == original }, "\(subscriptions)")
            }
            /// Moves the App Store's clock past the current month's end and waits for what follows.
            func nextMonth() async throws {
                let simulated = try await api.simulator("/simulator/subscriptions/\(original)")
                let expires = try #require(simulated["expiresDate"] as? Double) / 1000
                let now = try await api.simulatorNow().timeIntervalSince1970
                try await api.advance(seconds: max(0, expires - now) + 3600)
                try await api.settle()
            }

            var subscription = try await read()
            var plan = try #require(subscription["billingPlan"] as? [String: Any], "\(subscription)")
            #expect(plan["type"] as? String == "MONTHLY")
            #expect(plan["period"] as? Int == 1 && plan["periods"] as? Int == 12, "\(plan)")
            #expect(plan["monthlyPrice"] as? String == "8.34" && plan["commitmentPrice"] as? String == "100.08", "\(plan)")
            #expect(plan["currency"] as? String == "USD")
            #expect(plan["commitmentRenews"] as? Bool == true)
            let commitmentEnd = try #require(plan["commitmentExpiresDate"] as? Int)
            // Access follows the month, not the commitment.
            let monthEnd = try #require(subscription["expiresDate"] as? Int)
            #expect(monthEnd < commitmentEnd - 300 * 86_400_000, "the first month ends long before the commitment")

            try await nextMonth()
            subscription = try await read()
            plan = subscription["billingPlan"] as? [String: Any] ?? [:]
            #expect(plan["period"] as? Int == 2, "\(subscription)")
            #expect(subscription["status"] as? String == "active")
            #expect(try await api.access(ann, "premium"))

            // The customer turns off the commitment's renewal: monthly billing and access go on.
            try await api.simulator("/simulator/subscriptions/\(original)/auto-renew-off", "{}")
            try await api.settle()
            subscription = try await read()
            plan = subscription["billingPlan"] as? [String: Any] ?? [:]
            #expect(plan["commitmentRenews"] as? Bool == false, "\(subscription)")
            #expect(subscription["autoRenew"] as? Bool == true, "the subscription's own auto-renew stays on: \(subscription)")
            #expect(subscription["status"] as? String == "active")
            #expect(try await api.access(ann, "premium"))

            for month in 3...12 {
                try await nextMonth()
                subscription = try await read()
                plan = subscription["billingPlan"] as? [String: Any] ?? [:]
                #expect(plan["period"] as? Int == month, "month \(month): \(subscription)")
                #expect(try await api.access(ann, "premium"), "month \(month): access runs to the commitment's end")
            }
            #expect(plan["commitmentExpiresDate"] as? Int == commitmentEnd)

            // After the twelfth month: EXPIRED, access ends.
            try await nextMonth()
            subscription = try await read()
            #expect(subscription["status"] as? String == "expired", "\(subscription)")
            #expect(try await !api.access(ann, "premium"))
        }
    }
}
