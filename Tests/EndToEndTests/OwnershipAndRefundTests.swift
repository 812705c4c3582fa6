import Entitlements
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// Transfers under each policy, refunds, family revocations and reversed refunds, and the
/// Newsstand question answered from history.
@Suite struct OwnershipAndRefundTests {
    @Test(.timeLimit(.minutes(3))) func eachTransferPolicyDecidesWhoKeepsAPurchase() async throws {
        try await EntitleStack.run("transfer") { stack in
            try await stack.startWorker()
            for publisher in ["demo", "keep", "share"] {
                let bought = try await stack.purchase("premium.annual", publisher: publisher)
                let jws = try #require(bought["signedTransaction"] as? String)
                let first = try await stack.receipt(["publisher": publisher, "customer": "first@example.com", "signedTransaction": jws])
                #expect(first["accessGranted"] as? Bool == true)
                let second = try await stack.receipt(["publisher": publisher, "customer": "second@example.com", "signedTransaction": jws])
                let now = try await SubscriptionTests.simulatorNow(stack)
                let firstState = try await stack.customer("first@example.com", publisher: publisher)
                let secondState = try await stack.customer("second@example.com", publisher: publisher)
                switch publisher {
                case "demo":  // transfer, Cleeng's behaviour: the new customer has it, the previous one no more
                    #expect(second["accessGranted"] as? Bool == true)
                    let transfer = try #require(second["transfer"] as? [String: Any])
                    #expect(transfer["from"] as? String == "first@example.com" && transfer["to"] as? String == "second@example.com")
                    let (record, result) = try await stack.finished(try #require(transfer["jobId"] as? String))
                    #expect(record.type == "transfer" && record.status == .succeeded)
                    #expect(
                        result["previousOwner"] as? String == "first@example.com" && result["newOwner"] as? String == "second@example.com")
                    #expect(firstState.entitlements(at: now).isEmpty)
                    #expect(secondState.entitlements(at: now) == ["hd", "premium"])
                    // History: before the transfer, the first customer was entitled, the second was not.
                    let purchased = try #require(firstState.periods.first?.start)
                    #expect(firstState.entitlements(at: purchased) == ["hd", "premium"])
                    #expect(secondState.entitlements(at: purchased).isEmpty)
                case "keep":
                    #expect(second["accessGranted"] as? Bool == false && second["reason"] as? String == "ownedByAnotherCustomer")
                    #expect(firstState.entitlements(at: now) == ["hd", "premium"])
                    #expect(secondState.entitlements(at: now).isEmpty)
                default:  // share
                    #expect(second["accessGranted"] as? Bool == true && second["sharedWith"] as? String == "first@example.com")
                    #expect(firstState.entitlements(at: now) == ["hd", "premium"])
                    #expect(secondState.entitlements(at: now) == ["hd", "premium"])
                }
            }
        }
    }

    @Test(.timeLimit(.minutes(3))) func refundsRevocationsAndReversalsEndAndRestoreAccess() async throws {
        try await EntitleStack.run("refund") { stack in
            try await stack.startWorker()
            // Newsstand: one issue bought, the other not; a 30-day pass with the same Apple account.
            let issue = try await stack.purchase("issue.2026.11")
            let account = try #require(issue["appleAccount"] as? String)
            let pass = try await stack.purchase("pass.30days", #""appleAccount":"\#(account)""#)
            // The app sends its receipt (the legacy road): both purchases in it are applied.
            let fromReceipt = try await stack.receipt([
                "customer": "reader@example.com", "appReceipt": try #require(pass["appReceipt"] as? String),
            ])
            #expect(fromReceipt["accessGranted"] as? Bool == true && fromReceipt["offerId"] as? String == "pass-30")
            var state = try await stack.customer("reader@example.com")
            var now = try await SubscriptionTests.simulatorNow(stack)
            #expect(state.entitlements(at: now) == ["issue:2026-11", "premium"])
            #expect(
                state.entitlements(at: now.addingTimeInterval(31 * 86_400)) == ["issue:2026-11"],
                "the pass lasts 30 days, the issue for ever")
            let bought = try #require(state.periods.map(\.start).min())
            #expect(state.entitlements(at: bought.addingTimeInterval(-1)).isEmpty, "nothing before the purchases")

            // Refund of the issue: access ends at the refund date; reversed: it is back.
            let issueId = try #require(issue["transactionId"] as? String)
            _ = try await stack.simulatorCall("/simulator/transactions/\(issueId)/refund", "{}")
            try await stack.waitForCustomer("reader@example.com", "issue refunded") { $0.transactions[issueId]?.revocationDate != nil }
            now = try await SubscriptionTests.simulatorNow(stack)
            state = try await stack.customer("reader@example.com")
            #expect(state.entitlements(at: now) == ["premium"])
            let issuePeriod = try #require(state.periods.first { $0.transactionId == issueId })
            #expect(issuePeriod.endReason == .refunded && issuePeriod.endedAt == state.transactions[issueId]?.revocationDate)
            #expect(state.entitlements(at: issuePeriod.start).contains("issue:2026-11"), "history before the refund stands")
            _ = try await stack.simulatorCall("/simulator/transactions/\(issueId)/refund-reversed", "{}")
            try await stack.waitForCustomer("reader@example.com", "refund reversed") { $0.transactions[issueId]?.revocationDate == nil }
            #expect(
                try await stack.customer("reader@example.com").entitlements(at: try await SubscriptionTests.simulatorNow(stack)) == [
                    "issue:2026-11", "premium",
                ])

            // Family sharing revoked, and a subscription refunded.
            let family = try await stack.purchase("premium.monthly", #""familyShared":true"#)
            let familyId = try #require(family["transactionId"] as? String)
            _ = try await stack.receipt([
                "customer": "family@example.com", "signedTransaction": try #require(family["signedTransaction"] as? String),
            ])
            _ = try await stack.simulatorCall("/simulator/transactions/\(familyId)/revoke", "{}")
            try await stack.waitForCustomer("family@example.com", "revoked") { $0.subscriptions[familyId]?.status == .revoked }
            #expect(try await stack.customer("family@example.com").periods.first?.endReason == .revoked)

            let subscription = try await stack.purchase("basic.monthly")
            let subscriptionId = try #require(subscription["transactionId"] as? String)
            _ = try await stack.receipt([
                "customer": "refunded@example.com", "signedTransaction": try #require(subscription["signedTransaction"] as? String),
            ])
            _ = try await stack.simulatorCall("/simulator/transactions/\(subscriptionId)/refund", "{}")
            try await stack.waitForCustomer("refunded@example.com", "subscription refunded") {
                $0.subscriptions[subscriptionId]?.status == .revoked
            }
            #expect(
                try await stack.customer("refunded@example.com").entitlements(at: try await SubscriptionTests.simulatorNow(stack)).isEmpty)

            // Refund notifications became refund jobs, all succeeded.
            let refunds = try await stack.notificationJobs().compactMap { $0.result["refundJobId"] as? String }
            #expect(refunds.count >= 4)
            for id in refunds { #expect(try await stack.finished(id).record.status == .succeeded) }
        }
    }
}
