import EntitleCore
import Foundation
import JobQueue
import Testing

/// A claim that waits for a transfer it asked for: when that transfer has finished and
/// another customer holds the purchase again (a third claim took it meanwhile), the claim
/// asks anew, instead of finding its first request under its key and waiting for good.
@Suite struct TransferRequestTests {
    @Test(.timeLimit(.minutes(3))) func aClaimWhoseTransferFinishedBeforeAnotherTookThePurchaseAsksAgain() async throws {
        try await APIStack.run("transfer-again", worker: true) { api in
            let (xena, yves, zoe) = ("xena-again@example.com", "yves-again@example.com", "zoe-again@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            let proof = try #require(bought["signedTransaction"] as? String)
            _ = try await api.claim(["customer": xena, "signedTransaction": proof])

            // Yves's claim (job J) asked for the move from Xena, and it was made ...
            let claimJob = "yves-claim-\(UUID().uuidString.prefix(8).lowercased())"
            let asked = JobPayloads.Transfer(publisher: "demo", originalTransactionId: original, to: yves, from: xena)
            let first = try await api.jobQueue.enqueue(
                try EnqueueRequest(asked, queue: "default", idempotencyKey: "transfer:\(claimJob):\(original)"))
            #expect(try await api.result(first.id)["newOwner"] as? String == yves)
            // ... then Zoe took the purchase before J ran again.
            #expect(try await api.transfer(original, to: zoe, from: nil)["newOwner"] as? String == zoe)

            // J runs (again): it asks for the move from Zoe, and ends holding the purchase.
            let claim = JobPayloads.Receipt(publisher: "demo", customer: yves, signedTransaction: proof)
            let job = try await api.jobQueue.enqueue(try EnqueueRequest(claim, queue: "default", id: claimJob))
            let result = try await api.result(job.id)
            #expect(result["accessGranted"] as? Bool == true, "\(result)")
            let transfer = try #require(result["transfer"] as? [String: Any], "\(result)")
            #expect(transfer["from"] as? String == zoe && transfer["jobId"] as? String != first.id, "\(result)")
            #expect(try await api.access(yves, "premium"))
            #expect(try await !api.access(zoe, "premium"))
        }
    }

    /// A claim whose transfer was made, the purchase then moved on (the publisher's backend
    /// moved it to another customer), is decided again when it runs again: an app's claim
    /// whose proof has gone stale meanwhile is refused, and does not take the purchase back
    /// on the decision its earlier run made.
    @Test(.timeLimit(.minutes(3))) func aClaimWhoseTransferWasMadeIsDecidedAgainOnceThePurchaseMovedOn() async throws {
        try await APIStack.run("transfer-spent", worker: true) { api in
            let (xena, yves, zoe) = ("xena-spent@example.com", "yves-spent@example.com", "zoe-spent@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            let proof = try #require(bought["signedTransaction"] as? String)
            _ = try await api.claim(["customer": xena, "signedTransaction": proof])

            // Yves's app posted the proof (job J, due a little later). J's earlier run decided on
            // a transfer, asked for it (its memo), and it was made ...
            let claimJob = "yves-spent-\(UUID().uuidString.prefix(8).lowercased())"
            let claim = JobPayloads.Receipt(publisher: "demo", customer: yves, signedTransaction: proof, appKey: "demo-app")
            _ = try await api.jobQueue.enqueue(try EnqueueRequest(claim, queue: "default", delay: .seconds(8), id: claimJob))
            let asked = JobPayloads.Transfer(
                publisher: "demo", originalTransactionId: original, to: yves, from: xena, road: .appKey, vouchedBy: .recentSignature)
            let first = try await api.jobQueue.enqueue(
                try EnqueueRequest(asked, queue: "default", idempotencyKey: "transfer:\(claimJob):\(original)"))
            let memo = #"{"jobId":"\#(first.id)","from":"\#(xena)","to":"\#(yves)","vouchedBy":"recentSignature"}"#
            let keys = QueueKeys(prefix: api.jobQueue.configuration.prefix, queue: "default")
            _ = try await api.jobQueue.redis.send(["HSET", keys.job(claimJob), "memo:transfer", memo])
            #expect(try await api.result(first.id)["newOwner"] as? String == yves)
            // ... then the publisher's backend moved the purchase to Zoe, and days went by.
            #expect(try await api.transfer(original, to: zoe, from: nil)["newOwner"] as? String == zoe)
            try await api.advance(seconds: 3 * 86_400)

            let result = try await api.result(claimJob)
            #expect(result["accessGranted"] as? Bool == false, "\(result)")
            #expect(result["reason"] as? String == "staleProofOfPurchase", "\(result)")
            #expect(try await api.access(zoe, "premium"), "Zoe keeps it")
            #expect(try await !api.access(yves, "premium"))
        }
    }
}
