import Foundation
import RedisTestSupport
import Testing

/// What the publishers' own specifications ask for, as their clients call it: Cloud
/// Softphone's validation web service as its spec shows it, and Cleeng's coupons.
@Suite struct SeedContractTests {
    /// Cloud Softphone puts the receipt into the GET query unencoded: each `+` of the base64
    /// arrives as a space. The customer is a plain username (`johndow`); price and currency
    /// reach the ledger.
    @Test(.timeLimit(.minutes(3))) func johndowValidatesWithAnUnencodedReceiptAndThePriceIsOnTheLedger() async throws {
        try await APIStack.run("softphone", worker: true) { api in
            let bought = try await api.buy("credits.100", publisher: "softphone")
            let receipt = try #require(bought["appReceipt"] as? String)
            try #require(receipt.contains("+"), "a receipt with a + (the case that broke)")
            let query =
                "token=\(APIStack.softphoneAppKey)&username=johndow&receipt=\(receipt)&product=com.entitle.softphone.credits.100&price=0.99&currency=USD"
            let reply = try await api.call(.GET, "/v1/validate?\(query)", token: nil, route: "GET /v1/validate")
            #expect(reply.status == 200, "\(reply.text)")
            #expect(reply.text.contains("<result>ok</result>") && reply.text.contains("<credits>100</credits>"), "\(reply.text)")
            let jobId = try #require(reply.text.components(separatedBy: "<jobId>").last?.components(separatedBy: "</jobId>").first)
            let result = try await api.result(jobId, token: APIStack.softphoneToken)
            #expect(result["price"] as? String == "0.99" && result["currency"] as? String == "USD", "\(result)")
            #expect(result["customer"] as? String == "johndow")

            let johndow = try await api.customer("johndow", token: APIStack.softphoneToken)
            let ledger = try #require((johndow["credits"] as? [String: Any])?["ledger"] as? [[String: Any]])
            #expect(ledger.count == 1)
            #expect(ledger.first?["price"] as? String == "0.99" && ledger.first?["currency"] as? String == "USD", "\(ledger)")
            // An email is not what this publisher calls its customers by: refused with the spec's message.
            let email = try await api.call(
                .GET, "/v1/validate?\(query.replacingOccurrences(of: "johndow", with: "john%20dow"))", token: nil, route: "GET /v1/validate"
            )
            #expect(email.status == 400 && email.text.contains("<message>username must be a username without spaces</message>"))

            // Apple's signed price wins where there is one (StoreKit 2).
            let signed = try await api.buy("credits.100", account: nil)
            _ = try await api.claim([
                "customer": "ann@example.com", "signedTransaction": try #require(signed["signedTransaction"] as? String),
            ])
            let ann = try await api.customer("ann@example.com")
            let entry = ((ann["credits"] as? [String: Any])?["ledger"] as? [[String: Any]])?.first
            #expect(entry?["price"] as? String == "0.99" && entry?["currency"] as? String == "USD", "\(ann)")
        }
    }

    /// A receipt Apple calls malformed (21002) after it decoded here is not retried for half
    /// an hour as if Apple were down: three attempts, then the spec's error with a message.
    @Test(.timeLimit(.minutes(3))) func aReceiptAppleCallsMalformedIsRetriedAFewTimesThenAnswered() async throws {
        try await APIStack.run("malformed", worker: true) { api in
            let bought = try await api.buy("credits.100", publisher: "softphone")
            try await api.simulator("/simulator/faults", #"{"target":"verifyReceipt","receiptStatus":21002,"count":20}"#)
            let reply = try await api.call(
                .POST, "/v1/validate?token=\(APIStack.softphoneAppKey)", token: nil, headers: ["Accept": "application/json"],
                json: [
                    "username": "johndow", "receipt": try #require(bought["appReceipt"] as? String),
                    "product": "com.entitle.softphone.credits.100",
                ],
                route: "POST /v1/validate")
            var answer = reply.json
            if reply.status == 503, let id = answer["jobId"] as? String {
                // Still retrying when the wait ended: the job finishes soon after.
                let result = try await api.result(id, token: APIStack.softphoneToken)
                answer = ["result": "error", "code": result["reason"] ?? "", "message": result["message"] ?? ""]
            } else {
                #expect(reply.status == 403, "\(reply.text)")
            }
            #expect(answer["result"] as? String == "error" && answer["code"] as? String == "invalidReceipt", "\(answer)")
            #expect((answer["message"] as? String ?? "").contains("malformed"), "\(answer)")
            let jobId = try #require(answer["jobId"] as? String ?? reply.json["jobId"] as? String)
            let job = try await api.finished(jobId, token: APIStack.softphoneToken)
            #expect(job["attempt"] as? Int == 3, "three attempts, not a retry schedule meant for Apple's outages: \(job)")
            try await api.simulator("/simulator/faults", method: .DELETE)
        }
    }

    /// Cleeng's coupons: a campaign carries what it grants and the result says what was
    /// applied; an unknown coupon is said, and the purchase is processed all the same.
    @Test(.timeLimit(.minutes(3))) func couponsSayWhatTheyGrantAndAnUnknownOneIsSaid() async throws {
        try await APIStack.run("coupons", worker: true) { api in
            func pay(_ customer: String, _ bought: [String: Any], coupon: String) async throws -> [String: Any] {
                let body: [String: Any] = [
                    "customerEmail": customer, "offerId": "premium", "appType": "ios", "couponCode": coupon,
                    "receipt": [
                        "transactionId": bought["transactionId"] as? String ?? "", "receiptData": bought["appReceipt"] as? String ?? "",
                    ],
                ]
                let reply = try await api.call(
                    .POST, "/apple/payment", token: nil, headers: CompatibilityRouteTests.cleengHeaders, json: body,
                    route: "POST /apple/payment")
                try #require(reply.status == 200, "\(reply.text)")
                return try await api.result(try #require(reply.json["jobId"] as? String))
            }
            let production = ["environment": "Production"]
            // The offer code: 4.99 USD for three months.
            let welcome = try await api.buy(
                "premium.monthly", account: nil, extra: ["environment": "Production", "offerCode": "WELCOME50"])
            let applied = try await pay("kim@example.com", welcome, coupon: "WELCOME50")
            #expect(applied["accessGranted"] as? Bool == true)
            let coupon = try #require(applied["coupon"] as? [String: Any])
            #expect(coupon["known"] as? Bool == true && coupon["applied"] as? Bool == true, "\(coupon)")
            let grants = try #require(coupon["grants"] as? [String: Any])
            #expect(grants["introductoryPrice"] as? String == "4.99" && grants["currency"] as? String == "USD")
            #expect(grants["billingCycles"] as? Int == 3)

            // The introductory offer (a free week), through /v1/purchases.
            let trial = try await api.buy("premium.monthly", account: nil, extra: production)
            let free = try await api.claim([
                "customer": "lee@example.com", "signedTransaction": try #require(trial["signedTransaction"] as? String),
                "couponCode": "FREEWEEK",
            ])
            let freeCoupon = try #require(free["coupon"] as? [String: Any])
            #expect(freeCoupon["applied"] as? Bool == true, "\(freeCoupon)")
            #expect((freeCoupon["grants"] as? [String: Any])?["freePeriod"] as? String == "P1W")

            // A campaign Apple's transaction shows no use of: not applied, and said.
            let plain = try await api.buy("premium.monthly", account: nil, extra: production)
            let notUsed = try await pay("max@example.com", plain, coupon: "WELCOME50")
            #expect(notUsed["accessGranted"] as? Bool == true)
            #expect((notUsed["coupon"] as? [String: Any])?["applied"] as? Bool == false)
            #expect(((notUsed["coupon"] as? [String: Any])?["message"] as? String ?? "").contains("no use of coupon WELCOME50"))

            // An unknown coupon: the purchase is processed at Apple's price, and the coupon said unknown.
            let other = try await api.buy("premium.monthly", account: nil, extra: production)
            let unknown = try await pay("ned@example.com", other, coupon: "NOSUCH")
            #expect(unknown["accessGranted"] as? Bool == true, "\(unknown)")
            let said = try #require(unknown["coupon"] as? [String: Any])
            #expect(said["known"] as? Bool == false && said["applied"] as? Bool == false && said["grants"] == nil)
            #expect((said["message"] as? String ?? "").contains("unknown coupon NOSUCH"), "\(said)")
            #expect(try await api.access("ned@example.com", "premium"))
        }
    }
}
