import Entitlements
import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// Apple's nine V1 notification types, applied through verifyReceipt; and bad input refused
/// with a reason, nothing written.
@Suite struct NotificationAndInputTests {
    static let v1Types: Set<String> = [
        "CANCEL", "DID_CHANGE_RENEWAL_PREF", "DID_CHANGE_RENEWAL_STATUS", "DID_FAIL_TO_RENEW", "DID_RECOVER", "DID_RENEW",
        "INTERACTIVE_RENEWAL", "REFUND", "REVOKE",
    ]

    @Test(.timeLimit(.minutes(3))) func theNineV1NotificationsAreVerifiedWithAppleAndApplied() async throws {
        try await EntitleStack.run("v1") { stack in
            await stack.receiver.set(v2: false, v1: true)
            try await stack.startWorker()
            let basic = try await stack.purchase("basic.monthly")
            let id = try #require(basic["originalTransactionId"] as? String)
            _ = try await stack.receipt(["customer": "legacy@example.com", "appReceipt": try #require(basic["appReceipt"] as? String)])
            func event(_ path: String, _ json: String = "{}") async throws {
                _ = try await stack.simulatorCall("/simulator/subscriptions/\(id)/\(path)", json)
            }
            try await event("renew")
            try await event("auto-renew-off")
            try await event("auto-renew-on")
            try await event("upgrade", #"{"productId":"com.entitle.demo.premium.monthly"}"#)
            try await stack.waitForCustomer("legacy@example.com", "upgraded by INTERACTIVE_RENEWAL") {
                $0.subscriptions[id]?.productId == "com.entitle.demo.premium.monthly"
            }
            try await event("downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            try await stack.waitForCustomer("legacy@example.com", "downgrade pending") {
                $0.subscriptions[id]?.autoRenewProductId == "com.entitle.demo.basic.monthly"
            }
            try await event("billing-failure")
            try await stack.advance(seconds: 300)
            try await stack.waitForCustomer("legacy@example.com", "billing failed") { $0.subscriptions[id]?.status == .gracePeriod }
            try await event("billing-recovery")
            try await stack.waitForCustomer("legacy@example.com", "recovered") { $0.subscriptions[id]?.status == .active }
            let latest = try #require(try await stack.simulatorCall("/simulator/subscriptions/\(id)")["transactionIds"] as? [String]).last
            _ = try await stack.simulatorCall("/simulator/transactions/\(try #require(latest))/refund", "{}")
            try await stack.waitForCustomer("legacy@example.com", "cancelled") { $0.subscriptions[id]?.status == .revoked }

            let issue = try await stack.purchase("issue.2026.12")
            let issueId = try #require(issue["transactionId"] as? String)
            _ = try await stack.receipt([
                "customer": "legacy@example.com", "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            _ = try await stack.simulatorCall("/simulator/transactions/\(issueId)/refund", "{}")
            try await stack.waitForCustomer("legacy@example.com", "issue refunded") { $0.transactions[issueId]?.revocationDate != nil }

            let family = try await stack.purchase("premium.annual", #""familyShared":true"#)
            let familyId = try #require(family["transactionId"] as? String)
            _ = try await stack.receipt([
                "customer": "member@example.com", "signedTransaction": try #require(family["signedTransaction"] as? String),
            ])
            _ = try await stack.simulatorCall("/simulator/transactions/\(familyId)/revoke", "{}")
            try await stack.waitForCustomer("member@example.com", "revoked") { $0.subscriptions[familyId]?.status == .revoked }

            var seen: Set<String> = []
            try await eventually("a job for each V1 type") {
                seen = Set(try await stack.notificationJobs().compactMap { $0.v1Type })
                return seen.isSuperset(of: Self.v1Types)
            }
            for job in try await stack.notificationJobs() where Self.v1Types.contains(job.v1Type ?? "") {
                #expect(job.record.status == .succeeded, "\(job.v1Type ?? ""): \(job.record.lastError ?? "")")
                #expect(job.result["customer"] as? String != nil, "\(job.v1Type ?? "") was applied to a customer: \(job.result)")
            }
        }
    }

    @Test(.timeLimit(.minutes(3))) func badPurchasesAreRefusedWithAReasonAndWriteNothing() async throws {
        try await EntitleStack.run("refusals") { stack in
            try await stack.startWorker()
            let credits = try await stack.purchase("credits.100")
            let jws = try #require(credits["signedTransaction"] as? String)
            // `keep` sells no credits: its own app's credits product maps to no offer.
            let keepCredits = try #require(try await stack.purchase("credits.100", publisher: "keep")["signedTransaction"] as? String)
            var parts = jws.split(separator: ".").map(String.init)
            parts[1] = String(parts[1].dropLast(4)) + "AAAA"
            let cases: [([String: Any], String)] = [
                (["customer": "bad@example.com", "signedTransaction": "abc.def.ghi"], "invalidReceipt"),
                (["customer": "bad@example.com", "signedTransaction": parts.joined(separator: ".")], "invalidReceipt"),
                (["customer": "bad@example.com", "appReceipt": "AAAA"], "invalidReceipt"),
                (["publisher": "keep", "customer": "bad@example.com", "signedTransaction": keepCredits], "unknownProduct"),
                (["publisher": "other", "customer": "bad@example.com", "signedTransaction": jws], "wrongBundle"),
                (["customer": "bad@example.com", "signedTransaction": jws, "offerId": "premium"], "offerMismatch"),
            ]
            for (payload, reason) in cases {
                let result = try await stack.receipt(payload)
                #expect(result["accessGranted"] as? Bool == false && result["reason"] as? String == reason, "\(reason): \(result)")
                #expect(!(result["message"] as? String ?? "").isEmpty)
            }
            for publisher in ["demo", "keep", "other"] {
                #expect(try await stack.store.load(publisher: publisher, customer: "bad@example.com").version == 0, "nothing written")
            }
            // Payloads that can never work fail at once, with a message, without retries.
            let broken: [([String: Any], String)] = [
                (["publisher": "nobody", "customer": "x", "signedTransaction": jws], "no publisher \"nobody\""),
                (["publisher": "demo", "signedTransaction": jws], "customer is missing"),
                (["publisher": "demo", "customer": "x", "signedTransaction": jws, "appReceipt": "AAAA"], "exactly one of"),
            ]
            for (payload, message) in broken {
                let (record, _) = try await stack.finished(try await stack.enqueue("receipt", payload))
                #expect(record.status == .failed && record.attempt == 1)
                #expect(record.lastError?.contains(message) == true, "\(record.lastError ?? "")")
            }

            // `entitle jobs show --json` has the documented shape and leaves the payload out.
            let id = try await stack.enqueue("receipt", ["publisher": "demo", "customer": "good@example.com", "signedTransaction": jws])
            _ = try await stack.finished(id)
            let shown = try await ChildProcess.run(
                ChildProcess.entitleExecutable, ["jobs", "show", id, "--json", "--redis", stack.redisURL, "--prefix", stack.prefix])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [String: Any])
            #expect(Set(object.keys).isSuperset(of: ["id", "type", "status", "attempt", "result"]) && object["payload"] == nil)
            #expect((object["result"] as? [String: Any])?["accessGranted"] as? Bool == true)
            let customer = try await ChildProcess.run(
                ChildProcess.entitleExecutable,
                [
                    "customers", "show", "good@example.com", "--publisher", "demo", "--json", "--redis", stack.redisURL, "--prefix",
                    stack.prefix,
                ])
            let document = try #require(try JSONSerialization.jsonObject(with: Data(customer.output.utf8)) as? [String: Any])
            #expect((document["credits"] as? [String: Any])?["balance"] as? Int == 100)
        }
    }
}
