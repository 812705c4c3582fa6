import Foundation
import RedisTestSupport
import Testing

/// A purchase claimed back and forth (A -> B -> A -> B -> A) under each transfer policy
/// (`transfer` for demo, `keep`, `share`),
/// for every product kind, with renewals, a refund and its reversal in between, all through
/// the API, the worker and the simulator with Apple's notifications flowing: after every
/// step exactly the customers who should hold it have access.
@Suite struct PingPongTests {
    static let kinds: [(product: String, offer: String)] = [
        ("issue.2026.12", "issue-2026-12"), ("pass.30days", "pass-30"), ("premium.monthly", "premium"), ("credits.100", "credits-100"),
    ]

    @Test(.timeLimit(.minutes(8)), arguments: [("demo", APIStack.demoToken), ("keep", APIStack.keepToken), ("share", APIStack.shareToken)])
    func exactlyTheHoldersHaveAccessAfterEveryStep(publisher: String, token: String) async throws {
        // Apple notifies one URL per app: this publisher's.
        try await APIStack.run("ping-pong-\(publisher)", worker: true, notify: [publisher]) { api in
            // Time moves only when the test moves it: no renewal happens between two checks.
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            for (product, offer) in Self.kinds {
                try await pingPong(api, publisher: publisher, token: token, product: product, offer: offer)
            }
        }
    }

    func pingPong(_ api: APIStack, publisher: String, token: String, product: String, offer: String) async throws {
        let ann = "ann-\(publisher)-\(offer)@example.com"
        let bob = "bob-\(publisher)-\(offer)@example.com"
        let consumable = offer == "credits-100"
        let subscription = offer == "premium"
        let bought = try await api.buy(product, account: "account-\(publisher)-\(offer)", publisher: publisher, extra: ["environment": "Production"])
        let id = try #require(bought["transactionId"] as? String)
        let original = try #require(bought["originalTransactionId"] as? String)
        var holders: Set<String> = []
        var refunded = false

        func check(_ step: String) async throws {
            try await api.settle()
            // Asked a moment after the step: the clock is frozen, and the jobs' "now" is the
            // step's instant give or take the milliseconds between reading the clock and using it.
            try await api.advance(seconds: 1)
            for customer in [ann, bob] {
                let expected = holders.contains(customer) && !refunded
                if consumable {
                    let credits = try await api.customer(customer, token: token)["credits"] as? [String: Any]
                    let balance = credits?["balance"] as? Int ?? 0
                    #expect(balance == (expected ? 100 : 0), "\(publisher) \(offer) \(step): \(customer) has \(balance) credits")
                } else {
                    let access = try await api.access(customer, offer, token: token)
                    #expect(access == expected, "\(publisher) \(offer) \(step): \(customer) access \(access), expected \(expected)")
                }
            }
        }

        for (step, claimant) in [ann, bob, ann, bob, ann].enumerated() {
            try await api.advance(seconds: 60)
            switch step {
            case 0:
                _ = try await api.claim(
                    ["customer": claimant, "signedTransaction": try #require(bought["signedTransaction"] as? String)], token: token)
            case 2 where publisher == "demo" && !consumable:
                // The publisher moves it back itself.
                _ = try await api.transfer(original, to: claimant, from: bob, token: token)
            case 2, 3:
                // The app's receipt, with the purchase it is about.
                _ = try await api.claim(
                    ["customer": claimant, "appReceipt": try #require(bought["appReceipt"] as? String), "transactionId": id], token: token)
            default:
                _ = try await api.claim(["customer": claimant, "transactionId": id], token: token)
            }
            switch (consumable, publisher) {
            case (true, _), (false, "keep"): holders = [ann]
            case (false, "share"): holders.insert(claimant)
            default: holders = [claimant]
            }
            try await check("claim \(step + 1) by \(claimant == ann ? "ann" : "bob")")

            if step == 1 || step == 3, subscription {
                // A renewal (the free week ends, or the month): Apple's notification reaches every holder.
                try await api.advance(seconds: (step == 1 ? 8 : 31) * 86_400)
                try await check("renewed after claim \(step + 1)")
            }
            if step == 2 {
                // The latest transaction refunded, then the refund reversed.
                let latest = subscription ? try await latestTransaction(api, original) : id
                try await api.advance(seconds: 60)
                try await api.simulator("/simulator/transactions/\(latest)/refund", "{}")
                refunded = true
                try await check("refunded")
                try await api.advance(seconds: 60)
                try await api.simulator("/simulator/transactions/\(latest)/refund-reversed", "{}")
                if subscription { try await api.simulator("/simulator/subscriptions/\(original)/auto-renew-on", "{}") }
                refunded = false
                try await check("refund reversed")
            }
        }
    }

    func latestTransaction(_ api: APIStack, _ original: String) async throws -> String {
        let subscription = try await api.simulator("/simulator/subscriptions/\(original)")
        return try #require((subscription["transactionIds"] as? [String])?.last)
    }
}
