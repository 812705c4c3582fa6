import Foundation
import Testing

/// A refund Apple tells before any customer claims the purchase reaches nobody then; the
/// signed transaction the app kept from before it does not show it. Claimed later with that
/// transaction, the purchase must not give the access Apple took back: the refund is kept
/// for whoever claims it (and so is its reversal).
@Suite struct UnheldRefundTests {
    /// The V2 notification a control call made, posted as Apple would; its job's result,
    /// and that of the refund job it queued.
    func forwarded(_ answer: [String: Any], _ api: APIStack) async throws -> [String: Any] {
        let uuid = try #require((answer["notificationUUID"] as? String) ?? (answer["notifications"] as? [String])?.first, "\(answer)")
        let notification = try await api.forward(try await api.sentNotification(uuid))
        return try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))
    }

    @Test(.timeLimit(.minutes(3))) func aPurchaseRefundedBeforeItsClaimGivesNoAccessWithAProofFromBefore() async throws {
        try await APIStack.run("unheld-refund", worker: true) { api in
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let credits = try await api.buy("credits.100", extra: ["environment": "Production"])
            for bought in [issue, credits] {
                let id = try #require(bought["transactionId"] as? String)
                let refund = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund", "{}"), api)
                #expect(refund["customer"] == nil && refund["refunded"] as? Bool == true, "\(refund)")
                #expect((refund["message"] as? String)?.contains("kept") == true, "\(refund)")
            }

            let customer = "ann-unheld@example.com"
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            #expect(claimed["accessGranted"] as? Bool == false, "the proof from before the refund gave access: \(claimed)")
            #expect(try await !api.access(customer, "issue-2026-11"))
            let topUp = try await api.claim([
                "customer": customer, "signedTransaction": try #require(credits["signedTransaction"] as? String),
            ])
            let balance = (try await api.customer(customer)["credits"] as? [String: Any])?["balance"] as? Int
            #expect(balance == 0, "refunded credits were granted: \(topUp)")

            // Held now, Apple's next word reaches the holder directly: the refund reversed.
            let issueId = try #require(issue["transactionId"] as? String)
            let reversed = try await forwarded(try await api.simulator("/simulator/transactions/\(issueId)/refund-reversed", "{}"), api)
            #expect(reversed["customer"] as? String == customer, "\(reversed)")
            #expect(try await api.access(customer, "issue-2026-11"), "the reversal gave the purchase back")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aRefundReversedBeforeTheClaimGivesAccess() async throws {
        try await APIStack.run("unheld-reversal", worker: true) { api in
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            _ = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund", "{}"), api)
            let reversed = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}"), api)
            #expect(reversed["customer"] == nil && reversed["refunded"] as? Bool == false, "\(reversed)")

            let customer = "bob-unheld@example.com"
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
            #expect(try await api.access(customer, "issue-2026-11"))
        }
    }
}
