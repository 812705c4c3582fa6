import EntitleCore
import Foundation
import HTTPTestSupport
import Hummingbird
import RedisTestSupport
import Testing

/// Claims an app cannot be tricked into (`ClaimRule`), end to end through the API, a worker and
/// the simulator: another customer's old signed transaction or app receipt, replayed through an
/// app key, moves nothing; Apple's fresh word (a proof signed today, the claimant's
/// `appAccountToken`) does; the publisher's backend keeps its rules; the preflight answers each
/// case without writing; every move is a `transfer` webhook saying who asked and why.
@Suite struct ClaimProofTests {
    static let ann = "ann@example.com"
    static let bob = "bob@example.com"
    static let carol = "carol@example.com"
    static let dave = "dave@example.com"
    static let namespace = "6f0c2b4e-8a4d-4c61-9e2a-3b1d5f7a9c10"
    static let keepAppKey = "app-key-keep-0123456789"
    static let webhookSecret = "webhook-secret-claims-0123456789"

    /// The stack with a webhook receiver for demo, demo's customers' `appAccountToken`s derived
    /// from a namespace, and an app key (with customer tokens) for `keep`.
    static func run(_ name: String, _ body: @Sendable @escaping (APIStack, RequestLog) async throws -> Void) async throws {
        let hooks = RequestLog()
        let receiver = Router()
        receiver.post("hooks") { request, _ -> Response in
            try await hooks.record(request)
            return Response(status: .ok)
        }
        try await LoopbackServer.run(receiver) { hookURL in
            try await APIStack.run(
                name, worker: true, environment: ["ENTITLE_KEEP_APP_KEY": keepAppKey, "ENTITLE_CLAIMS_WEBHOOK_SECRET": webhookSecret],
                catalog: { publishers in
                    for index in publishers.indices {
                        switch publishers[index]["id"] as? String {
                        case "demo":
                            publishers[index]["appAccountTokenNamespace"] = namespace
                            publishers[index]["webhook"] = ["url": hookURL + "/hooks", "secretVariable": "ENTITLE_CLAIMS_WEBHOOK_SECRET"]
                        case "keep":
                            var api = publishers[index]["api"] as? [String: Any] ?? [:]
                            api["appKeys"] = [["id": "keep-app", "variable": "ENTITLE_KEEP_APP_KEY"]]
                            api["customerTokens"] = [
                                "keys": [["kid": "k1", "algorithm": "HS256", "secretVariable": "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET"]]
                            ]
                            publishers[index]["api"] = api
                        default: break
                        }
                    }
                }
            ) { api in try await body(api, hooks) }
        }
    }

    /// `POST /v1/purchases` through an app key, as `customer`'s app: the job's document.
    static func appClaim(
        _ api: APIStack, _ body: [String: Any], as customer: String, key: String = APIStack.appKey, audience: String = "demo",
        dryRun: Bool = false
    ) async throws -> [String: Any] {
        let token = customerToken(customer, audience: audience)
        let reply = try await api.call(
            .POST, "/v1/purchases" + (dryRun ? "?dryRun=true" : ""), token: key, headers: ["X-Customer-Token": token], json: body,
            route: "POST /v1/purchases")
        if dryRun {
            try #require(reply.status == 200, "a dry run answers once its job has finished: \(reply.status) \(reply.text)")
            #expect(!reply.text.contains("@example.com\"") || reply.text.contains(customer), "a dry run names nobody else to an app")
            return reply.json
        }
        try #require(reply.status == 202, "\(reply.status) \(reply.text)")
        let id = try #require(reply.json["jobId"] as? String)
        return try await api.finished(id, token: key, headers: ["X-Customer-Token": token])
    }

    /// What a claim must never change: owners, customers (of this publisher) and their versions.
    static func state(_ api: APIStack) async throws -> [String: Int] {
        // Locks and their fence counters are how jobs take turns, not what they decided.
        try await api.keys().filter { $0.key.contains(":ent:") && !$0.key.contains(":lock:") && !$0.key.contains(":fence:") }
    }

    static func result(_ document: [String: Any]) throws -> [String: Any] {
        try #require(document["status"] as? String == "succeeded", "\(document)")
        return try #require(document["result"] as? [String: Any])
    }

    @Test(.timeLimit(.minutes(5))) func anOldSignedTransactionMovesNothingThroughAnAppKeyAndAFreshOneMovesIt() async throws {
        try await Self.run("claims-jws") { api, hooks in
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let oldJWS = try #require(bought["signedTransaction"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)
            let ann = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.ann))
            #expect(ann["accessGranted"] as? Bool == true, "\(ann)")
            #expect((ann["claim"] as? [String: Any])?["outcome"] as? String == "granted", "\(ann)")

            // Three days later (App Store time) the JWS Ann's app sent is stale.
            try await api.advance(seconds: 3 * 86_400)
            let before = try await Self.state(api)

            // The preflight says it would be refused, and writes nothing.
            let preview = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.bob, dryRun: true))
            #expect(preview["dryRun"] as? Bool == true)
            #expect(preview["reason"] as? String == "staleProofOfPurchase", "\(preview)")
            let previewClaim = try #require(preview["claim"] as? [String: Any])
            #expect(previewClaim["outcome"] as? String == "refused")
            #expect(previewClaim["heldByAnotherCustomer"] as? Bool == true)
            #expect(previewClaim["transferredFrom"] == nil)
            #expect(try await Self.state(api) == before, "a dry run writes nothing")

            // The replay itself: refused, nothing changed, Ann keeps access.
            let replay = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.bob))
            #expect(replay["accessGranted"] as? Bool == false)
            #expect(replay["reason"] as? String == "staleProofOfPurchase", "\(replay)")
            #expect((replay["message"] as? String ?? "").contains("ask StoreKit"), "\(replay)")
            #expect(!"\(replay)".contains(Self.ann), "an app never learns who holds it")
            #expect(try await Self.state(api) == before, "a refused claim changes nothing")
            #expect(try await api.customer(Self.ann)["entitlements"] as? [String] == ["hd", "premium"])
            #expect(try await api.customer(Self.bob).isEmpty, "Bob is not even a customer")

            // StoreKit's current transaction (signed now): the preflight says it would move, the claim moves it.
            let fresh = try #require(try await api.simulator("/simulator/transactions/\(transactionId)")["signedTransaction"] as? String)
            let wouldMove = try Self.result(try await Self.appClaim(api, ["signedTransaction": fresh], as: Self.bob, dryRun: true))
            let wouldClaim = try #require(wouldMove["claim"] as? [String: Any])
            #expect(wouldClaim["outcome"] as? String == "transfer", "\(wouldMove)")
            #expect(wouldClaim["vouchedBy"] as? String == "recentSignature")
            #expect(wouldClaim["transferredFrom"] == nil, "not named to an app key")
            #expect(wouldMove["accessGranted"] as? Bool == true, "\(wouldMove)")
            let afterPreview = try await Self.state(api)
            #expect(
                afterPreview == before,
                "a dry run writes nothing: \(Set(before.keys).union(afterPreview.keys).filter { before[$0] != afterPreview[$0] }.map { "\($0) \(before[$0] ?? 0) -> \(afterPreview[$0] ?? 0)" })"
            )

            let moved = try Self.result(try await Self.appClaim(api, ["signedTransaction": fresh], as: Self.bob))
            #expect(moved["accessGranted"] as? Bool == true, "\(moved)")
            #expect((moved["claim"] as? [String: Any])?["outcome"] as? String == "transfer", "\(moved)")
            #expect(!"\(moved)".contains(Self.ann), "an app never learns who held it: \(moved)")
            #expect(try await api.customer(Self.bob)["entitlements"] as? [String] == ["hd", "premium"])
            #expect(try await api.customer(Self.ann)["entitlements"] as? [String] == [])

            // The backend (a secret key) keeps today's rules: the old JWS moves it to Carol, naming Bob.
            let backend = try await api.claim(["customer": Self.carol, "signedTransaction": oldJWS])
            let backendClaim = try #require(backend["claim"] as? [String: Any])
            #expect(backendClaim["outcome"] as? String == "transfer", "\(backend)")
            #expect(backendClaim["vouchedBy"] as? String == "secretKey")
            #expect(backendClaim["transferredFrom"] as? String == Self.bob)
            #expect((backend["transfer"] as? [String: Any])?["from"] as? String == Self.bob)
            #expect(try await api.customer(Self.carol)["entitlements"] as? [String] == ["hd", "premium"])
            #expect(try await api.customer(Self.bob)["entitlements"] as? [String] == [])

            // Two moves, two `transfer` webhooks saying who asked and why.
            let deliveries = await hooks.wait(for: "/hooks", count: 4)
            let transfers = deliveries.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }
                .filter { $0["type"] as? String == "transfer" }
            try #require(transfers.count == 2, "\(transfers)")
            let byApp = try #require(transfers.first { $0["to"] as? String == Self.bob })
            #expect(byApp["road"] as? String == "appKey")
            #expect(byApp["vouchedBy"] as? String == "recentSignature")
            #expect(byApp["from"] as? String == Self.ann)
            #expect(byApp["appAccountTokenMatched"] == nil, "the purchase carries no token")
            let byBackend = try #require(transfers.first { $0["to"] as? String == Self.carol })
            #expect(byBackend["road"] as? String == "secretKey")
            #expect(byBackend["vouchedBy"] as? String == "secretKey")
        }
    }

    @Test(.timeLimit(.minutes(5))) func theClaimantsAppAccountTokenMovesItWhateverTheAgeAndKeepKeepsIt() async throws {
        try await Self.run("claims-token") { api, hooks in
            // Ann's app bought it; the support desk then binds it to Dave at Apple (Set App Account Token).
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let oldJWS = try #require(bought["signedTransaction"] as? String)
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.ann))
            try await api.advance(seconds: 5 * 86_400)
            let dave = try Self.uuid5(Self.dave)
            let set = try await api.call(
                .PUT, "/v1/purchases/\(original)/appAccountToken", json: ["appAccountToken": dave],
                route: "PUT /v1/purchases/{originalTransactionId}/appAccountToken")
            try #require(set.status == 202, "\(set.text)")
            #expect(try await api.finished(try #require(set.json["jobId"] as? String))["status"] as? String == "succeeded")

            // Dave's app restores with the five-day-old JWS: Apple's current answer (the job asks
            // for the subscription's statuses) carries Dave's token, so it moves.
            let restored = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.dave))
            let claim = try #require(restored["claim"] as? [String: Any])
            #expect(claim["outcome"] as? String == "transfer", "\(restored)")
            #expect(claim["vouchedBy"] as? String == "appAccountToken")
            #expect(try await api.customer(Self.dave)["entitlements"] as? [String] == ["hd", "premium"])
            #expect(try await api.customer(Self.ann)["entitlements"] as? [String] == [])
            let transfer = try #require(
                await hooks.wait(for: "/hooks", count: 3).compactMap {
                    try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any]
                }
                .first { $0["type"] as? String == "transfer" })
            #expect(transfer["appAccountTokenMatched"] as? Bool == true, "\(transfer)")
            #expect(transfer["vouchedBy"] as? String == "appAccountToken")
            // Anyone else's app is refused outright: the purchase is Dave's at Apple.
            let other = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.bob))
            #expect(other["reason"] as? String == "appAccountTokenMismatch", "\(other)")

            // `keep` keeps, however fresh the proof.
            let kept = try await api.buy("premium.monthly", publisher: "keep", extra: ["environment": "Production"])
            let keptJWS = try #require(kept["signedTransaction"] as? String)
            _ = try await api.claim(["customer": Self.ann, "signedTransaction": keptJWS], token: APIStack.keepToken)
            let refused = try Self.result(
                try await Self.appClaim(
                    api, ["signedTransaction": keptJWS], as: Self.bob, key: Self.keepAppKey, audience: "keep"))
            #expect(refused["reason"] as? String == "ownedByAnotherCustomer", "\(refused)")
            #expect((refused["claim"] as? [String: Any])?["outcome"] as? String == "refused")
            #expect(try await api.customer(Self.ann, token: APIStack.keepToken)["entitlements"] as? [String] == ["hd", "premium"])
        }
    }

    @Test(.timeLimit(.minutes(5))) func anOldAppReceiptMovesNothingThroughAnAppKeyAndARefreshedOneMovesIt() async throws {
        try await Self.run("claims-receipt") { api, _ in
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            let oldReceipt = try #require(bought["appReceipt"] as? String)
            _ = try Self.result(try await Self.appClaim(api, ["appReceipt": oldReceipt], as: Self.ann))
            try await api.advance(seconds: 2 * 86_400)
            let before = try await Self.state(api)
            let replay = try Self.result(try await Self.appClaim(api, ["appReceipt": oldReceipt], as: Self.bob))
            #expect(replay["reason"] as? String == "staleProofOfPurchase", "\(replay)")
            #expect(try await Self.state(api) == before)
            // The receipt the device holds after a refresh was created now.
            let refreshed = try #require(try await api.simulator("/simulator/subscriptions/\(original)")["appReceipt"] as? String)
            let moved = try Self.result(try await Self.appClaim(api, ["appReceipt": refreshed], as: Self.bob))
            #expect((moved["claim"] as? [String: Any])?["outcome"] as? String == "transfer", "\(moved)")
            #expect(try await api.customer(Self.bob)["entitlements"] as? [String] == ["hd", "premium"])
        }
    }

    @Test(.timeLimit(.minutes(5))) func aPurchaseNobodyClaimedIsClaimedFirstThroughAnAppKeyOnlyWithFreshProof() async throws {
        try await Self.run("claims-first") { api, _ in
            // Bought days ago by someone who never brought it here; its JWS leaked from a log.
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let oldJWS = try #require(bought["signedTransaction"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)
            try await api.advance(seconds: 2 * 86_400)
            let before = try await Self.state(api)
            let preview = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.bob, dryRun: true))
            #expect(preview["reason"] as? String == "staleProofOfPurchase", "\(preview)")
            #expect((preview["claim"] as? [String: Any])?["heldByAnotherCustomer"] as? Bool == false)
            let replay = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.bob))
            #expect(replay["reason"] as? String == "staleProofOfPurchase", "\(replay)")
            let after = try await Self.state(api)
            #expect(after == before, "a refused first claim writes nothing: no owner, no customer: \(after) vs \(before)")
            // The backend may claim it with any proof; the buyer's own app with a fresh one.
            let fresh = try #require(try await api.simulator("/simulator/transactions/\(transactionId)")["signedTransaction"] as? String)
            let claimed = try Self.result(try await Self.appClaim(api, ["signedTransaction": fresh], as: Self.ann))
            #expect((claimed["claim"] as? [String: Any])?["vouchedBy"] as? String == "recentSignature", "\(claimed)")
            #expect(try await api.customer(Self.ann)["entitlements"] as? [String] == ["hd", "premium"])
            // The holder sending its old proof again is answered as before.
            let again = try Self.result(try await Self.appClaim(api, ["signedTransaction": oldJWS], as: Self.ann))
            #expect(again["accessGranted"] as? Bool == true, "\(again)")
            #expect((again["claim"] as? [String: Any])?["outcome"] as? String == "granted")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aSpendReferenceReusedWithAnotherAmountIsAConflictAndSpendsNothing() async throws {
        try await APIStack.run("claims-spend", worker: true) { api in
            let bought = try await api.buy("credits.100")
            _ = try await api.claim(["customer": Self.ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let path = "/v1/customers/ann%40example.com/credits/spend"
            let route = "POST /v1/customers/{id}/credits/spend"
            let first = try await api.call(.POST, path, json: ["amount": 30, "reference": "call-42"], route: route)
            try #require(first.status == 202)
            let firstJob = try #require(first.json["jobId"] as? String)
            #expect((try await api.result(firstJob))["creditBalance"] as? Int == 70)
            // The same request again is the same job; another amount under the reference is a 409.
            let again = try await api.call(.POST, path, json: ["amount": 30, "reference": "call-42"], route: route)
            #expect(again.json["jobId"] as? String == firstJob)
            let enqueued = try await api.enqueuedCount()
            let other = try await api.call(.POST, path, json: ["amount": 50, "reference": "call-42"], route: route)
            #expect(other.status == 409, "\(other.text)")
            #expect(other.json["error"] as? String == "referenceConflict")
            #expect(other.message.contains("call-42"))
            #expect(try await api.enqueuedCount() == enqueued, "nothing queued")
            // Once its key has gone (24 h), the ledger still knows the reference.
            let keyed = try await api.jobQueue.redis.send(["KEYS", api.jobQueue.configuration.prefix + ":*idem*spend*"])
            for key in (keyed.array ?? []).compactMap(\.string) { _ = try await api.jobQueue.redis.send(["DEL", key]) }
            let late = try await api.call(.POST, path, json: ["amount": 50, "reference": "call-42"], route: route)
            #expect(late.status == 409, "\(late.text)")
            #expect(try await api.enqueuedCount() == enqueued, "nothing queued")
            let credits = try #require(try await api.customer(Self.ann)["credits"] as? [String: Any])
            #expect(credits["balance"] as? Int == 70, "nothing spent twice")
        }
    }

    /// The appAccountToken the publisher's namespace gives a customer (UUIDv5, as its apps make it).
    static func uuid5(_ customer: String) throws -> String {
        AppAccountToken.uuid5(namespace: try #require(UUID(uuidString: namespace)), name: customer).uuidString.lowercased()
    }
}
