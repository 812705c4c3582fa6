import EntitleCore
import EntitlementJobs
import Foundation
import HTTPTestSupport
import RedisTestSupport
import Synchronization
import Testing

/// A refund Apple tells before any customer claims the purchase reaches nobody then; the
/// signed transaction the app kept from before it does not show it. Claimed later with that
/// transaction, the purchase must not give the access Apple took back: the refund is kept
/// for whoever claims it (and so is its reversal).
@Suite struct UnheldRefundTests {
    /// The V2 notification a control call made, posted as Apple would; its job's result,
    /// and that of the refund job it queued.
    func forwarded(_ answer: [String: Any], _ api: APIStack) async throws -> [String: Any] {
        let notification = try await notified(answer, api)
        return try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))
    }

    /// The V2 notification a control call made, posted as Apple would; its job's result.
    func notified(_ answer: [String: Any], _ api: APIStack) async throws -> [String: Any] {
        let uuid = try #require((answer["notificationUUID"] as? String) ?? (answer["notifications"] as? [String])?.first, "\(answer)")
        return try await api.forward(try await api.sentNotification(uuid))
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

    @Test(.timeLimit(.minutes(3))) func aReversalToldBeforeItsRefundStillOutranksIt() async throws {
        try await APIStack.run("unheld-reversal-first", worker: true) { api in
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            let refund = try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            try await api.advance(seconds: 60)
            let reversal = try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}")
            // Apple's retries can bring them in any order: the newer signed view stands.
            _ = try await forwarded(reversal, api)
            _ = try await forwarded(refund, api)

            let customer = "cid-unheld@example.com"
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            #expect(claimed["accessGranted"] as? Bool == true, "the refund told late took back a purchase Apple gave back: \(claimed)")
        }
    }

    /// The refund Apple told, held back to be posted at the fault point.
    final class HeldRefund: Sendable {
        struct Armed: Sendable {
            var api: APIStack
            var original: String
            var notification: RequestLog.Entry
        }
        let armed = Mutex<Armed?>(nil)
        let refund = Mutex<[String: String]>([:])
    }

    /// A receipt job whose lease ran out between its read and its claim (its lock deleted at
    /// the fault point) while a refund job took the lock and kept Apple's word for whoever
    /// claims: the claim is refused (the lock passed on), and the job's next run, under the
    /// lock again, reads the refund and grants nothing.
    @Test(.timeLimit(.minutes(3))) func aRefundKeptAfterTheClaimsLeaseRanOutIsNotMissed() async throws {
        let held = HeldRefund()
        try await APIStack.run(
            "unheld-lapsed", worker: true,
            service: { service in
                let store = service.store
                service.beforeClaimingWrite = { _, ids in
                    guard
                        let armed = held.armed.withLock({ armed in
                            defer { armed = nil }; return armed
                        })
                    else { return }
                    #expect(ids == [armed.original])
                    _ = try await store.redis.send(["DEL", store.keys.lock("demo", armed.original)])
                    let notification = try await armed.api.forward(armed.notification)
                    let refund = try await armed.api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))
                    held.refund.withLock { $0 = refund.compactMapValues { $0 as? String } }
                }
            }
        ) { api in
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            let told = try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            let uuid = try #require((told["notificationUUID"] as? String) ?? (told["notifications"] as? [String])?.first, "\(told)")
            let armed = HeldRefund.Armed(
                api: api, original: try #require(issue["originalTransactionId"] as? String),
                notification: try await api.sentNotification(uuid))
            held.armed.withLock { $0 = armed }

            let customer = "lapsed-unheld@example.com"
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            #expect(held.armed.withLock { $0 == nil }, "the fault point ran")
            #expect(held.refund.withLock { $0["message"] }?.contains("kept") == true, "\(held.refund.withLock { $0 })")
            #expect(claimed["accessGranted"] as? Bool == false, "the refund kept after the lease ran out was missed: \(claimed)")
            #expect(try await !api.access(customer, "issue-2026-11"))
        }
    }

    /// A refund job stalled before it keeps Apple's word (its lease ran out: its lock deleted
    /// at the fault point), and a receipt job that took the lock meanwhile, read before the
    /// keeping and claims after it.
    final class KeepRace: Sendable {
        let armed = Mutex<String?>(nil)
        let refundJob = Mutex<String?>(nil)
        let keeperStalled = Mutex(false)
        let claimerCame = Mutex(false)
        let (claimerAtWrite, claimerArrived) = AsyncStream.makeStream(of: Void.self)
        let store = Mutex<EntitlementStore?>(nil)
    }

    /// The refund job, told its lock passed on, runs again and finds the claimant holding the
    /// purchase: Apple's word reaches them, not a hash nobody reads again, nor one a later
    /// claim would read.
    @Test(.timeLimit(.minutes(3))) func aRefundKeptAfterItsLeaseRanOutReachesTheClaimMadeMeanwhile() async throws {
        let race = KeepRace()
        try await APIStack.run(
            "unheld-keep-lapsed", worker: true, catalog: { publishers in publishers[0]["transferPolicy"] = "share" },
            service: { service in
                let store = service.store
                let queue = service.jobQueue
                race.store.withLock { $0 = store }
                service.beforeKeeping = { job, id in
                    guard job.type == "refund",
                        race.armed.withLock({ armed in
                            defer { armed = nil }; return armed == id
                        })
                    else { return }
                    _ = try await store.redis.send(["DEL", store.keys.lock("demo", id)])
                    race.keeperStalled.withLock { $0 = true }
                    for await _ in race.claimerAtWrite { break }
                }
                service.beforeClaimingWrite = { job, _ in
                    guard race.keeperStalled.withLock({ $0 }),
                        !race.claimerCame.withLock({ came in
                            defer { came = true }; return came
                        })
                    else { return }
                    race.claimerArrived.yield()
                    let refund = try #require(race.refundJob.withLock { $0 })
                    try await eventually("the refund job's run to end") {
                        try await queue.job(id: refund, queue: "default")?.status != .processing
                    }
                }
            }
        ) { api in
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            race.armed.withLock { $0 = issue["originalTransactionId"] as? String }
            let told = try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            let notification = try await notified(told, api)
            let refundJob = try #require(notification["refundJobId"] as? String, "\(notification)")
            race.refundJob.withLock { $0 = refundJob }
            try await eventually("the refund job to stall before keeping") { race.keeperStalled.withLock { $0 } }

            let customer = "kept-late@example.com"
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String)])
            #expect(race.claimerCame.withLock { $0 }, "the claim met the stalled refund")
            let refund = try await api.result(refundJob)
            #expect(refund["customer"] as? String == customer, "the refund did not reach the claimant: \(refund)")
            #expect(try await !api.access(customer, "issue-2026-11"))
            let store = try #require(race.store.withLock { $0 })
            let original = try #require(issue["originalTransactionId"] as? String)
            #expect(try await store.standing(publisher: "demo", originalTransactionId: original) == (held: true, kept: false))

            // Held now, nothing is kept for whoever claims next (on one server the refund job,
            // its lock passed on, kept nothing; `aRefundKeptLateForAHeldPurchaseReachesItsHolders`
            // covers a view kept all the same): the refund reversed reaches the holder directly,
            // and a customer who shares the purchase later, with the proof from before both,
            // gets what Apple said last, not the refund that raced the claim.
            let reversed = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}"), api)
            #expect(reversed["customer"] as? String == customer, "\(reversed)")
            #expect(try await api.access(customer, "issue-2026-11"), "the reversal gave the purchase back")
            // Apple's server cannot answer then: the proof and what is kept are all there is.
            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":500,"pathContains":"/transactions/","count":1000}"#)
            let next = "kept-late-next@example.com"
            let moved = try await api.claim(["customer": next, "signedTransaction": try #require(issue["signedTransaction"] as? String)])
            #expect(moved["accessGranted"] as? Bool == true, "a refund kept while it raced the claim outranked its reversal: \(moved)")
            #expect(try await api.access(next, "issue-2026-11"))
            #expect(try await api.access(customer, "issue-2026-11"), "shared")
        }
    }

    /// A view kept for a purchase a customer holds: what a claim whose job died before it
    /// forgot what was kept leaves behind, or a keeper whose lease ran out under versions
    /// before 2026-11-28 on a Redis Cluster. The next refund or notification job for the purchase
    /// gives it to the holders with its own word, the newest signed winning, and forgets it:
    /// a customer sharing the purchase later does not merge a refund its reversal undid.
    @Test(.timeLimit(.minutes(3))) func aRefundKeptLateForAHeldPurchaseReachesItsHolders() async throws {
        let captured = Mutex<EntitlementStore?>(nil)
        try await APIStack.run(
            "unheld-late", worker: true, catalog: { publishers in publishers[0]["transferPolicy"] = "share" },
            service: { service in captured.withLock { $0 = service.store } }
        ) { api in
            let store = try #require(captured.withLock { $0 })
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            let original = try #require(issue["originalTransactionId"] as? String)
            let refund = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund", "{}"), api)
            #expect((refund["message"] as? String)?.contains("kept") == true, "\(refund)")
            let key = store.keys.unheldFacts("demo", original)
            let kept = try await store.redis.send(["HGETALL", key]).fieldValues
            #expect(kept.count == 1, "the refund's view, kept: \(kept.keys)")

            let customer = "late-kept@example.com"
            let proof = try #require(issue["signedTransaction"] as? String)
            let claimed = try await api.claim(["customer": customer, "signedTransaction": proof])
            #expect(claimed["accessGranted"] as? Bool == false, "\(claimed)")
            #expect(try await store.standing(publisher: "demo", originalTransactionId: original) == (held: true, kept: false))
            // Kept again after the claim, as a late keeper would.
            for (field, value) in kept { _ = try await store.redis.send(["HSET", key, field, value]) }

            let reversed = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}"), api)
            #expect(reversed["customer"] as? String == customer && reversed["refunded"] as? Bool == false, "\(reversed)")
            #expect(try await api.access(customer, "issue-2026-11"), "the reversal gave the purchase back")
            #expect(try await store.standing(publisher: "demo", originalTransactionId: original) == (held: true, kept: false))

            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":500,"pathContains":"/transactions/","count":1000}"#)
            let sharer = "late-kept-sharer@example.com"
            let shared = try await api.claim(["customer": sharer, "signedTransaction": proof])
            #expect(shared["accessGranted"] as? Bool == true, "the refund kept late outranked its reversal: \(shared)")
            #expect(try await api.access(sharer, "issue-2026-11"))
        }
    }

    /// A kept view newer than the refund a job tells the holders (Apple's retries bring the
    /// refund after its reversal, which was kept while nobody held the purchase, and kept again
    /// after the claim): it stands, and the result says what the holders were told.
    @Test(.timeLimit(.minutes(3))) func aViewKeptNewerThanTheRefundToldStandsForItsHolders() async throws {
        let captured = Mutex<EntitlementStore?>(nil)
        try await APIStack.run(
            "unheld-newer", worker: true, service: { service in captured.withLock { $0 = service.store } }
        ) { api in
            let store = try #require(captured.withLock { $0 })
            let issue = try await api.buy("issue.2026.11", extra: ["environment": "Production"])
            let id = try #require(issue["transactionId"] as? String)
            let original = try #require(issue["originalTransactionId"] as? String)
            let refund = try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
            try await api.advance(seconds: 60)
            let reversal = try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}")
            _ = try await forwarded(reversal, api)
            let key = store.keys.unheldFacts("demo", original)
            let kept = try await store.redis.send(["HGETALL", key]).fieldValues
            #expect(kept.count == 1, "the reversal's view, kept: \(kept.keys)")

            let customer = "newer-kept@example.com"
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(issue["signedTransaction"] as? String),
            ])
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
            for (field, value) in kept { _ = try await store.redis.send(["HSET", key, field, value]) }

            let late = try await forwarded(refund, api)
            #expect(late["customer"] as? String == customer, "\(late)")
            #expect(late["refunded"] as? Bool == false, "the refund, older than the reversal kept, was said to stand: \(late)")
            #expect(try await api.access(customer, "issue-2026-11"))
            #expect(try await store.standing(publisher: "demo", originalTransactionId: original) == (held: true, kept: false))
        }
    }

    @Test(.timeLimit(.minutes(3))) func aNotificationClaimingByTokenAfterTheRefundGrantsNothing() async throws {
        try await APIStack.run(
            "unheld-token", worker: true, catalog: { publishers in publishers[0]["customerIdentity"] = "appAccountToken" }
        ) { api in
            let token = UUID().uuidString.lowercased()
            let credits = try await api.buy("credits.100", appAccountToken: token, extra: ["environment": "Production"])
            let id = try #require(credits["transactionId"] as? String)
            _ = try await forwarded(try await api.simulator("/simulator/transactions/\(id)/refund", "{}"), api)
            // The purchase's own notification, signed before the refund, comes late: it
            // claims the purchase for its token's customer.
            let late = try await notified(credits, api)
            #expect(late["customer"] as? String == token, "\(late)")
            let balance = (try await api.customer(token)["credits"] as? [String: Any])?["balance"] as? Int
            #expect(balance == 0, "refunded credits were granted: \(late)")
        }
    }

    /// A subscription whose later transaction (an upgrade) Apple refunded while nobody held
    /// it (kept, and told again by Apple's statuses), claimed with the proof of its first: the
    /// claim's answer, the dry run's too, is the purchase's standing once every view is
    /// applied (the refund revoked it), not the one after the first transaction alone.
    @Test(.timeLimit(.minutes(3))) func aClaimAnswersAfterEveryViewOfThePurchaseIsApplied() async throws {
        try await APIStack.run("unheld-upgrade", worker: true) { api in
            let basic = try await api.buy("basic.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            let original = try #require(basic["originalTransactionId"] as? String)
            let proof = try #require(basic["signedTransaction"] as? String)
            try await api.simulator("/simulator/subscriptions/\(original)/upgrade", #"{"productId":"com.entitle.demo.premium.monthly"}"#)
            let upgrade = try #require(
                (try await api.simulator("/simulator/subscriptions/\(original)")["transactionIds"] as? [String])?.last)
            let refund = try await forwarded(try await api.simulator("/simulator/transactions/\(upgrade)/refund", "{}"), api)
            #expect((refund["message"] as? String)?.contains("kept") == true, "\(refund)")

            let customer = "upgrade-refunded@example.com"
            let preview = try await api.call(
                .POST, "/v1/purchases?dryRun=true", json: ["customer": customer, "signedTransaction": proof], route: "POST /v1/purchases")
            try #require(preview.status == 200, "\(preview.status) \(preview.text)")
            let previewed = try #require(preview.json["result"] as? [String: Any], "\(preview.json)")
            let claimed = try await api.claim(["customer": customer, "signedTransaction": proof])
            let stored = try await api.customer(customer)
            #expect(try await !api.access(customer, "basic"), "\(stored)")
            #expect(try await !api.access(customer, "premium"), "\(stored)")
            for answer in [previewed, claimed] {
                #expect(answer["accessGranted"] as? Bool == false, "\(answer)")
                #expect(answer["reason"] as? String == "revoked", "\(answer)")
                #expect((answer["entitlements"] as? [String])?.isEmpty == true, "\(answer)")
                #expect((answer["subscription"] as? [String: Any])?["status"] as? String == "revoked", "\(answer)")
            }
        }
    }
}
