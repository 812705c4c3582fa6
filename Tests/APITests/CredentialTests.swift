import Crypto
import EntitleCore
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// The two kinds of credential: a publisher's secret keys (its backend) and app keys (inside
/// apps, so public), with customer tokens proving which customer an app acts for.
@Suite struct CredentialTests {
    static let purchases = "POST /v1/purchases"

    @Test func anAppKeyPostsProofForItsCustomerAndReadsOnlyWhatItsTokenAllows() async throws {
        try await APIStack.run("app-key", worker: true) { api in
            let ann = ["X-Customer-Token": customerToken("ann@example.com")]
            let bob = ["X-Customer-Token": customerToken("bob@example.com")]
            let bought = try await api.buy("premium.monthly")
            let signed = try #require(bought["signedTransaction"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)

            // Without a customer token, with a bare transaction id, for another customer, for another app: refused.
            let refusals: [(String, [String: String], [String: Any], Int, String)] = [
                ("no customer token", [:], ["signedTransaction": signed], 401, "customerTokenRequired"),
                ("a bare transaction id", ann, ["transactionId": transactionId], 403, "proofRequired"),
                ("another customer", ann, ["customer": "bob@example.com", "signedTransaction": signed], 403, "forbidden"),
                ("another app", ann, ["signedTransaction": signed, "bundleId": "com.example.nope"], 403, "forbidden"),
            ]
            for (name, headers, body, status, code) in refusals {
                let reply = try await api.call(
                    .POST, "/v1/purchases", token: APIStack.appKey, headers: headers, json: body, route: Self.purchases)
                #expect(reply.status == status && reply.json["error"] as? String == code, "\(name): \(reply.status) \(reply.text)")
            }
            #expect(try await api.enqueuedCount() == 0)

            // With proof and ann's token: queued for ann (the customer field may be left out).
            let posted = try await api.call(
                .POST, "/v1/purchases", token: APIStack.appKey, headers: ann, json: ["signedTransaction": signed], route: Self.purchases)
            #expect(posted.status == 202)
            let job = try #require(posted.json["jobId"] as? String)
            let read = try await api.call(.GET, "/v1/jobs/\(job)?wait=20", token: APIStack.appKey, headers: ann, route: "GET /v1/jobs/{id}")
            #expect(
                read.json["status"] as? String == "succeeded"
                    && (read.json["result"] as? [String: Any])?["customer"] as? String == "ann@example.com")
            // Its job is ann's: bob's token and no token see nothing of it.
            #expect(
                try await api.call(.GET, "/v1/jobs/\(job)", token: APIStack.appKey, headers: bob, route: "GET /v1/jobs/{id}").status == 404)
            #expect(try await api.call(.GET, "/v1/jobs/\(job)", token: APIStack.appKey, route: "GET /v1/jobs/{id}").status == 401)
            // A job the backend created is not the app's.
            let backend = try #require(
                try await api.call(.POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": transactionId]).json[
                    "jobId"]
                    as? String)
            #expect(try await api.call(.GET, "/v1/jobs/\(backend)", token: APIStack.appKey, headers: ann).status == 404)

            let entitlements = "GET /v1/customers/{id}/entitlements"
            #expect(
                try await api.call(
                    .GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey, headers: ann, route: entitlements
                )
                .json["entitlements"] as? [String] == ["hd", "premium"])
            #expect(
                try await api.call(
                    .GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey, headers: bob, route: entitlements
                )
                .status == 403)
            #expect(
                try await api.call(.GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey, route: entitlements).status
                    == 401)
            #expect(
                try await api.call(
                    .GET, "/v1/customers/ann%40example.com/access/premium", token: APIStack.appKey, headers: ann,
                    route: "GET /v1/customers/{id}/access/{offerId}"
                ).json["accessGranted"] as? Bool == true)

            // The backend's routes are not an app's.
            let transfer = try await api.call(
                .POST, "/v1/transfers", token: APIStack.appKey, headers: ann,
                json: ["originalTransactionId": transactionId, "to": "ann@example.com"], route: "POST /v1/transfers")
            #expect(transfer.status == 403)
            #expect(try await api.call(.GET, "/v1/queues", token: APIStack.appKey, route: "GET /v1/queues").status == 403)
            let cleeng = try await api.call(
                .POST, "/apple/payment", token: nil,
                headers: [
                    "X-Publisher-Token": APIStack.appKey, "Authorization": "Basic " + Data(APIStack.cleengBasic.utf8).base64EncodedString(),
                ],
                json: ["customerEmail": "ann@example.com"], route: "POST /apple/payment")
            #expect(cleeng.status == 401, "Cleeng's X-Publisher-Token is a secret key")
        }
    }

    @Test func customerTokensAreCheckedWholly() async throws {
        try await APIStack.run("customer-tokens") { api in
            let route = "GET /v1/customers/{id}/entitlements"
            let ann = "ann@example.com"
            let cases: [(String, String)] = [
                ("expired", customerToken(ann, lifetime: 600, issuedAgo: 3600)),
                ("another publisher's", customerToken(ann, audience: "other")),
                ("signed with another secret", customerToken(ann, secret: "guessed-secret")),
                ("an unknown kid", customerToken(ann, kid: "k9")),
                ("living longer than allowed", customerToken(ann, lifetime: 86_400)),
                ("alg none", Self.unsigned(ann)),
                ("HS256 where the key is", customerToken(ann, algorithm: "HS384")),
                ("naming an extension it must understand (crit)", customerToken(ann, extraHeader: ["crit": ["exp"]])),
                ("garbage", "a.b.c"),
                ("too long", String(repeating: "A", count: 5000)),
            ]
            for (name, token) in cases {
                let reply = try await api.call(
                    .GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey, headers: ["X-Customer-Token": token],
                    route: route)
                #expect(
                    reply.status == 401 && reply.json["error"] as? String == "invalidCustomerToken",
                    "\(name): \(reply.status) \(reply.text)")
            }
            // The good one reaches the route (ann is not a customer yet).
            let good = try await api.call(
                .GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey,
                headers: ["X-Customer-Token": customerToken(ann)], route: route)
            #expect(good.status == 404)
        }
    }

    @Test func es256CustomerTokensVerifyWithThePublicKeyInTheCatalog() async throws {
        let key = P256.Signing.PrivateKey()
        let pem = key.publicKey.pemRepresentation
        try await APIStack.run(
            "es256",
            catalog: { publishers in
                var access = publishers[0]["api"] as? [String: Any] ?? [:]
                access["customerTokens"] = ["keys": [["kid": "ec1", "algorithm": "ES256", "publicKey": pem]]]
                publishers[0]["api"] = access
            }
        ) { api in
            func token(_ signer: P256.Signing.PrivateKey) throws -> String {
                let header = Self.base64url(Data(#"{"alg":"ES256","kid":"ec1"}"#.utf8))
                let now = Int(Date().timeIntervalSince1970)
                let claims = Self.base64url(Data(#"{"aud":"demo","exp":\#(now + 300),"iat":\#(now),"sub":"ann@example.com"}"#.utf8))
                let signature = try signer.signature(for: Data("\(header).\(claims)".utf8))
                return "\(header).\(claims).\(Self.base64url(signature.rawRepresentation))"
            }
            let path = "/v1/customers/ann%40example.com/entitlements"
            let good = try token(key)
            let stranger = try token(P256.Signing.PrivateKey())
            #expect(try await api.call(.GET, path, token: APIStack.appKey, headers: ["X-Customer-Token": good]).status == 404)
            #expect(try await api.call(.GET, path, token: APIStack.appKey, headers: ["X-Customer-Token": stranger]).status == 401)
            // An HS256 token signed with the public key as its secret (algorithm confusion) is refused.
            let confused = customerToken("ann@example.com", secret: pem, kid: "ec1")
            #expect(try await api.call(.GET, path, token: APIStack.appKey, headers: ["X-Customer-Token": confused]).status == 401)
        }
    }

    /// Apple's binding of a purchase to an account (`appAccountToken`) outranks every
    /// transfer policy.
    @Test func aPurchaseBoundToAnotherAccountIsRefusedWhateverThePolicy() async throws {
        let namespace = UUID()
        try await APIStack.run(
            "app-account-token", worker: true,
            catalog: { publishers in publishers[0]["appAccountTokenNamespace"] = namespace.uuidString }
        ) { api in
            let annToken = AppAccountToken.uuid5(namespace: namespace, name: "ann@example.com").uuidString
            let bought = try await api.buy("premium.monthly", appAccountToken: annToken)
            let signed = try #require(bought["signedTransaction"] as? String)
            func claim(_ customer: String) async throws -> [String: Any] {
                let job = try #require(
                    try await api.call(.POST, "/v1/purchases", json: ["customer": customer, "signedTransaction": signed]).json["jobId"]
                        as? String)
                return try #require(try await api.call(.GET, "/v1/jobs/\(job)?wait=20").json["result"] as? [String: Any])
            }
            let bob = try await claim("bob@example.com")
            #expect(bob["accessGranted"] as? Bool == false && bob["reason"] as? String == "appAccountTokenMismatch", "\(bob)")
            #expect(bob["transfer"] == nil, "no transfer is asked for")
            let ann = try await claim("ann@example.com")
            #expect(ann["accessGranted"] as? Bool == true, "\(ann)")
            // Under the transfer policy, a transfer to bob is refused too.
            let original = try #require(bought["originalTransactionId"] as? String)
            let transfer = try #require(
                try await api.call(.POST, "/v1/transfers", json: ["originalTransactionId": original, "to": "bob@example.com"]).json["jobId"]
                    as? String)
            let finished = try await api.call(.GET, "/v1/jobs/\(transfer)?wait=20")
            #expect(
                finished.json["status"] as? String == "failed"
                    && (finished.json["lastError"] as? String ?? "").contains("appAccountTokenMismatch"))
            #expect(
                try await api.call(.GET, "/v1/customers/ann%40example.com/access/premium").json["accessGranted"] as? Bool == true,
                "ann keeps it")
        }
    }

    /// A customer's token where the demo publisher makes them in `namespace`.
    static func token(_ customer: String, in namespace: UUID) -> String {
        AppAccountToken.uuid5(namespace: namespace, name: customer).uuidString.lowercased()
    }

    /// Ann buys `product` with her token and claims it; then the publisher sets the purchase's
    /// token to bob's (Set App Account Token). The purchase's original transaction id, and
    /// ann's signed transaction from before.
    static func annBuysAndTheTokenBecomesBobs(
        _ api: APIStack, _ product: String, namespace: UUID
    ) async throws -> (
        original: String, annProof: String
    ) {
        let bought = try await api.buy(
            product, appAccountToken: token("ann@example.com", in: namespace), extra: ["environment": "Production"])
        let original = try #require(bought["originalTransactionId"] as? String)
        let annProof = try #require(bought["signedTransaction"] as? String)
        #expect(try await api.claim(["customer": "ann@example.com", "signedTransaction": annProof])["accessGranted"] as? Bool == true)
        let job = try await AppAccountTokenFlowTests().set(api, original, token("bob@example.com", in: namespace))
        #expect(job["status"] as? String == "succeeded", "\(job)")
        return (original, annProof)
    }

    /// The publisher sets a subscription's token again (Set App Account Token): the purchase
    /// is bound to the new account from its next transaction on. The new account's claim
    /// stands, and the old one's, with a transaction kept from before, is refused: Apple's
    /// statuses show the newest transaction naming another account.
    @Test func aPurchaseWhoseTokenWasSetAgainIsBoundByItsNewestTransaction() async throws {
        let namespace = UUID()
        try await APIStack.run(
            "app-account-token-reset", worker: true,
            catalog: { publishers in publishers[0]["appAccountTokenNamespace"] = namespace.uuidString }
        ) { api in
            let (original, annProof) = try await Self.annBuysAndTheTokenBecomesBobs(api, "premium.monthly", namespace: namespace)
            let renewed = try await api.simulator("/simulator/subscriptions/\(original)/renew", "{}")
            let bobProof = try #require(renewed["signedTransaction"] as? String)
            #expect(
                try AppAccountTokenFlowTests.payload(bobProof)["appAccountToken"] as? String == Self.token("bob@example.com", in: namespace)
            )

            let bob = try await api.claim(["customer": "bob@example.com", "signedTransaction": bobProof])
            #expect(bob["accessGranted"] as? Bool == true, "\(bob)")
            try await api.settle()
            #expect(try await api.access("bob@example.com", "premium"))
            #expect(try await !api.access("ann@example.com", "premium"))

            // Ann's transaction from before names her; the purchase no longer does.
            let ann = try await api.claim(["customer": "ann@example.com", "signedTransaction": annProof])
            #expect(ann["accessGranted"] as? Bool == false && ann["reason"] as? String == "appAccountTokenMismatch", "\(ann)")
            #expect(ann["transfer"] == nil, "no transfer is asked for")
            try await api.settle()
            #expect(try await api.access("bob@example.com", "premium"), "bob keeps it")
            #expect(try await !api.access("ann@example.com", "premium"))
        }
    }

    /// The same for a purchase bought once (an issue): the token set again binds it in Apple's
    /// current view of the transaction itself. Bob's claim takes that view; ann's signed
    /// transaction from before, still naming her, moves nothing back (the transfer it would
    /// set off finds bob's view signed later).
    @Test func aOneTimePurchaseWhoseTokenWasSetAgainStaysWithItsNewAccount() async throws {
        let namespace = UUID()
        try await APIStack.run(
            "app-account-token-issue", worker: true,
            catalog: { publishers in publishers[0]["appAccountTokenNamespace"] = namespace.uuidString }
        ) { api in
            let (id, annProof) = try await Self.annBuysAndTheTokenBecomesBobs(api, "issue.2026.11", namespace: namespace)
            let bob = try await api.claim(["customer": "bob@example.com", "transactionId": id])
            #expect(bob["accessGranted"] as? Bool == true, "\(bob)")
            try await api.settle()
            #expect(try await api.access("bob@example.com", "issue-2026-11"))
            #expect(try await !api.access("ann@example.com", "issue-2026-11"))

            let ann = try await api.finished(try await api.submit(["customer": "ann@example.com", "signedTransaction": annProof]))
            #expect(
                ann["status"] as? String == "failed" && "\(ann["lastError"] ?? "")".contains("appAccountTokenMismatch")
                    || (ann["result"] as? [String: Any])?["accessGranted"] as? Bool == false, "\(ann)")
            try await api.settle()
            #expect(try await api.access("bob@example.com", "issue-2026-11"), "bob keeps it")
            #expect(try await !api.access("ann@example.com", "issue-2026-11"))
        }
    }

    /// UUIDv5 as Python's `uuid.uuid5` makes it (RFC 9562's example).
    @Test func appAccountTokensDeriveAsPythonDerivesThem() {
        let dns = UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!
        #expect(
            AppAccountToken.uuid5(namespace: dns, name: "www.example.com").uuidString.lowercased() == "2ed6657d-e927-568b-95e1-2665a8aea6a2"
        )
    }

    static func base64url(_ bytes: some DataProtocol) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func unsigned(_ customer: String) -> String {
        let now = Int(Date().timeIntervalSince1970)
        return base64url(Data(#"{"alg":"none","kid":"k1"}"#.utf8)) + "."
            + base64url(Data(#"{"aud":"demo","exp":\#(now + 300),"iat":\#(now),"sub":"\#(customer)"}"#.utf8)) + "."
    }
}
