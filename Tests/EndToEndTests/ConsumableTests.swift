import Crypto
import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// "Add calling credit": a consumable is credited exactly once, whatever arrives twice and
/// whichever worker dies, and clawed back when Apple refunds it.
@Suite struct ConsumableTests {
    @Test(.timeLimit(.minutes(3))) func creditedOnceAcrossDuplicatesANotificationAndASIGKILLedWorker() async throws {
        try await EntitleStack.run("consumable") { stack in
            // A worker that dies right after writing the entitlement, before acknowledging the job.
            let doomed = try await stack.startWorker(environment: ["ENTITLE_CRASH_POINT": "after-entitlement-write"])
            let bought = try await stack.purchase("credits.100", #""quantity":2"#)
            let jws = try #require(bought["signedTransaction"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)
            let first = try await stack.enqueue(
                "receipt", ["publisher": "demo", "customer": "caller@example.com", "signedTransaction": jws])
            #expect(try await doomed.wait(timeout: .seconds(30)) != 0, "the crash point killed the worker")
            try await stack.waitForCustomer("caller@example.com", "credited before the crash") { $0.credits.balance == 200 }

            // Another worker reclaims the job; running it again adds nothing.
            try await stack.startWorker()
            let (record, result) = try await stack.finished(first)
            #expect(record.status == .succeeded)
            #expect(record.attempt == 2, "the reclaimed job ran a second time")
            #expect(result["accessGranted"] as? Bool == true)
            #expect((result["credits"] as? [String: Any])?["balance"] as? Int == 200)
            #expect((result["credits"] as? [String: Any])?["added"] as? Int == 0)

            // The app submits it again, and Apple's ONE_TIME_CHARGE arrives (twice).
            let again = try await stack.receipt(["customer": "caller@example.com", "signedTransaction": jws])
            #expect((again["credits"] as? [String: Any])?["added"] as? Int == 0)
            var notifications = try await stack.notificationJobs()
            try await eventually("the ONE_TIME_CHARGE notification job") {
                notifications = try await stack.notificationJobs()
                return notifications.contains { $0.result["notificationType"] as? String == "ONE_TIME_CHARGE" }
            }
            let charge = try #require(notifications.first { $0.result["notificationType"] as? String == "ONE_TIME_CHARGE" })
            // It may have come before the receipt job claimed the purchase: then it waits for that job.
            #expect(charge.record.status == .succeeded)
            #expect(
                charge.result["customer"] as? String == "caller@example.com"
                    || (charge.result["message"] as? String ?? "").contains("no customer holds this purchase yet"))
            let uuid = try #require(charge.result["notificationId"] as? String)
            _ = try await stack.simulatorCall("/simulator/notifications/\(uuid)/resend", "{}")
            try await eventually("the resent notification") {
                try await stack.notificationJobs().contains { $0.result["duplicate"] as? Bool == true }
            }
            var state = try await stack.customer("caller@example.com")
            #expect(state.credits.balance == 200)
            #expect(state.credits.entries.filter { $0.kind == .purchase }.count == 1)

            // Apple refunds it: the credits are clawed back once.
            _ = try await stack.simulatorCall("/simulator/transactions/\(transactionId)/refund", "{}")
            try await stack.waitForCustomer("caller@example.com", "clawed back") { $0.credits.balance == 0 }
            state = try await stack.customer("caller@example.com")
            #expect(state.credits.entries.map(\.amount) == [200, -200])
            #expect(state.transactions[transactionId]?.revocationDate != nil)

            // The publisher heard of it all, signed: purchase, credit, refund, clawback.
            let deliveries = await stack.receiver.webhooks.wait(for: "/webhook", count: 4)
            let events = deliveries.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }
            let types = events.compactMap { $0["type"] as? String }
            #expect(Set(types) == ["purchase", "credit", "refund"], "\(types)")
            #expect(events.filter { $0["type"] as? String == "credit" }.compactMap { $0["amount"] as? Int }.sorted() == [-200, 200])
            try await eventually("every delivery's signature to be recorded") {
                await stack.receiver.webhookSignatures.count == (await stack.receiver.webhooks.entries.count)
            }
            let signed = await stack.receiver.webhookSignatures
            #expect(signed.count >= 4 && signed.allSatisfy { !$0.signature.isEmpty }, "every delivery carried a signature")
            for (signature, body) in signed {
                let timestamp = try #require(signature.split(separator: ",").first?.dropFirst(2)).description
                let expected = WebhookJobHandler.signature(
                    body: String(decoding: body, as: UTF8.self), secrets: [Secret(EntitleStack.webhookSecret)],
                    timestamp: try #require(Int64(timestamp)))
                #expect(signature == expected)
            }
        }
    }
}
