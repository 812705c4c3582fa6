import Foundation
import JobQueue
import RedisTestSupport
import Reporting
import Testing

/// Apple's prorated refunds (`revocationType`, `revocationPercentage` in milliunits of a
/// percent) through the API, the worker and the simulator: the simulator refunds, its V2
/// notification reaches the API, the `refund` job applies it.
@Suite struct ProratedRefundFlowTests {
    /// Refunds `transactionId` at the simulator (`body` its control body), forwards the
    /// notification, and returns the `refund` job's result.
    static func refund(
        _ api: APIStack, _ transactionId: String, _ event: String = "refund", _ body: String = "{}"
    ) async throws
        -> [String: Any]
    {
        let answer = try await api.simulator("/simulator/transactions/\(transactionId)/\(event)", body)
        let uuid = try #require((answer["notifications"] as? [String])?.first)
        let notification = try await api.forward(try await api.sentNotification(uuid))
        return try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))
    }

    static func ledger(_ api: APIStack, _ customer: String) async throws -> (balance: Int?, entries: [[String: Any]]) {
        let credits = try await api.customer(customer)["credits"] as? [String: Any]
        return (credits?["balance"] as? Int, credits?["ledger"] as? [[String: Any]] ?? [])
    }

    /// `POST /v1/customers/{id}/credits/spend`, waited for: the job's result.
    static func spend(_ api: APIStack, _ customer: String, _ amount: Int, reference: String) async throws -> [String: Any] {
        let reply = try await api.call(
            .POST, "/v1/customers/\(APIStack.escape(customer))/credits/spend", json: ["amount": amount, "reference": reference],
            route: "POST /v1/customers/{id}/credits/spend")
        try #require(reply.status == 202, "spend answered \(reply.status): \(reply.text)")
        return try await api.result(try #require(reply.json["jobId"] as? String))
    }

    /// A paid monthly subscription in production, claimed by `customer` and refunded a
    /// quarter at the simulator: the simulator's time before the purchase, the transaction
    /// and the refund's V2 notification (left in the inbox).
    static func quarterRefunded(_ api: APIStack, _ customer: String) async throws -> (start: Date, id: String, uuid: String) {
        let start = try await api.simulatorNow()
        let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
        _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        let id = try #require(bought["transactionId"] as? String)
        let answer = try await api.simulator("/simulator/transactions/\(id)/refund", #"{"percentage":25000}"#)
        return (start, id, try #require((answer["notifications"] as? [String])?.first))
    }

    /// A report's total from `start`'s day to the simulator's today, the reports folded first.
    static func total(_ api: APIStack, _ metric: String, since start: Date) async throws -> Double {
        try await api.foldReports()
        let range = "from=\(ReportCalendar.utc.day(of: start))&to=\(ReportCalendar.utc.day(of: try await api.simulatorNow()))"
        let reply = try await api.call(.GET, "/v1/reports/\(metric)?\(range)&by=month", route: "GET /v1/reports/{metric}")
        try #require(reply.status == 200, "\(metric): \(reply.text)")
        return (reply.json["points"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["value"] as? Double ?? 0) }
    }

    @Test(.timeLimit(.minutes(3))) func aConsumableOfThreeItemsRefundedAt33333LosesAThird() async throws {
        try await APIStack.run("prorated-third", worker: true) { api in
            let customer = "pat@example.com"
            let bought = try await api.buy("credits.100", extra: ["quantity": 3])
            let claimed = try await api.claim([
                "customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            #expect((claimed["credits"] as? [String: Any])?["balance"] as? Int == 300, "\(claimed)")
            let id = try #require(bought["transactionId"] as? String)

            let result = try await Self.refund(api, id, "refund", #"{"percentage":33333}"#)
            #expect(result["refunded"] as? Bool == true)
            #expect(result["revocationType"] as? String == "REFUND_PRORATED", "\(result)")
            #expect(result["revocationPercentage"] as? Int == 33333)
            #expect(result["creditsClawedBack"] as? Int == 100 && result["creditShortfall"] as? Int == 0, "\(result)")
            #expect(result["creditBalance"] as? Int == 200)
            let (balance, entries) = try await Self.ledger(api, customer)
            #expect(balance == 200)
            #expect(entries.map { $0["amount"] as? Int } == [300, -100])
            #expect(entries.last?["kind"] as? String == "clawback" && entries.last?["percentage"] as? Int == 33333)
            #expect(entries.last?["shortfall"] == nil)
        }
    }

    /// Apple sends a refund's V1 notification and its V2 at once, and either job may take the
    /// purchase first. V1's receipt tells the refund's date but not its share: applied alone it
    /// would count a quarter refunded as the whole price. Its signed view is read first (Get
    /// Transaction Info), so the refund counts its share whichever comes first.
    @Test(.timeLimit(.minutes(3))) func aProratedRefundToldFirstByV1CountsItsShare() async throws {
        try await APIStack.run("prorated-v1", worker: true) { api in
            // Only V1 notifications, straight to the API: the V2 stays in the simulator's inbox.
            try await api.simulator("/simulator/notifications/url", #"{"v1Url":"\#(api.url)/v1/notifications/apple/demo"}"#)
            let start = try await api.simulatorNow()
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            _ = try await api.claim([
                "customer": "rio@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            let id = try #require(bought["transactionId"] as? String)
            try await api.simulator("/simulator/transactions/\(id)/refund", #"{"percentage":25000}"#)
            func total(_ metric: String) async throws -> Double { try await Self.total(api, metric, since: start) }
            var refunded = 0.0
            try await eventually("the V1 REFUND to be applied and folded", timeout: .seconds(30)) {
                refunded = try await total("refundAmount")
                return refunded > 0
            }
            let price = try await total("grossRevenue")
            #expect(price > 0)
            // A quarter of the price in the report's unit, rounded half up as Apple's share is.
            let quarter = Double((Int(price) * 25 + 50) / 100)
            #expect(refunded == quarter, "a quarter of \(price) refunded, counted \(refunded)")
            #expect(try await total("netRevenue") == price - quarter)
        }
    }

    /// The app posts its receipt, refreshed after a prorated refund, before Apple's V2
    /// notification arrives. The receipt says the transaction was refunded, not how much, so
    /// the refund counts the whole price; the V2 notification's signed view then tells the
    /// share, and a `refund_adjusted` event brings the report to what Apple refunded.
    @Test(.timeLimit(.minutes(3))) func aProratedRefundLearntFromTheAppsReceiptIsAdjustedByV2() async throws {
        try await APIStack.run("prorated-receipt", worker: true) { api in
            let customer = "sol@example.com"
            let (start, id, uuid) = try await Self.quarterRefunded(api, customer)
            let receipt = try #require(try await api.simulator("/simulator/subscriptions/\(id)")["appReceipt"] as? String)
            let claimed = try await api.claim(["customer": customer, "appReceipt": receipt])
            #expect(claimed["accessGranted"] as? Bool == false, "\(claimed)")

            func total(_ metric: String) async throws -> Double { try await Self.total(api, metric, since: start) }
            let price = try await total("grossRevenue")
            #expect(price > 0)
            #expect(try await total("refundAmount") == price, "the receipt's word alone: the whole price")

            let notification = try await api.forward(try await api.sentNotification(uuid))
            let refund = try await api.result(try #require(notification["refundJobId"] as? String, "\(notification)"))
            #expect(refund["revocationPercentage"] as? Int == 25_000, "\(refund)")
            let quarter = Double((Int(price) * 25 + 50) / 100)
            #expect(try await total("refundAmount") == quarter)
            #expect(try await total("netRevenue") == price - quarter)
            #expect(try await total("refunds") == 1, "one refund, its amount corrected")
            let events = try await api.events(customer)
            let adjusted = try #require(events.first { $0["type"] as? String == "refund_adjusted" }, "\(events)")
            #expect(adjusted["refundMilliunits"] as? Int == Int(quarter) && adjusted["previousRefundMilliunits"] as? Int == Int(price))
            #expect(adjusted["revocationType"] as? String == "REFUND_PRORATED" && adjusted["transactionId"] as? String == id)
        }
    }

    /// A V1 refund reads the refunded transaction's signed view (Get Transaction Info) before
    /// applying; while Apple's API fails, the job retries. On its last attempt it applies the
    /// receipt's word (the whole price) rather than die, and leaves a `refund` job for ten
    /// minutes on, which reads the signed view and adjusts the refund to its share: a
    /// publisher that takes only V1 notifications gets no V2 to do it.
    @Test(.timeLimit(.minutes(3))) func aV1RefundOnItsLastAttemptWhileAppleCannotAnswerIsAdjustedLater() async throws {
        try await APIStack.run("prorated-v1-last", worker: true) { api in
            let customer = "tam@example.com"
            let (start, id, _) = try await Self.quarterRefunded(api, customer)
            var v1: String?
            try await eventually("the V1 notification of the refund to reach the inbox") {
                v1 = await api.inbox.entries.lazy.filter { $0.path.hasSuffix("/v1") }.map { String(decoding: $0.body, as: UTF8.self) }
                    .first { $0.contains(id) && ($0.contains("CANCEL") || $0.contains("REFUND")) }
                return v1 != nil
            }
            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":500,"pathContains":"/transactions/","count":1000}"#)
            let payload = String(
                decoding: try JSONSerialization.data(withJSONObject: ["publisher": "demo", "v1": try #require(v1)]), as: UTF8.self)
            let job = try await api.jobQueue.enqueue(EnqueueRequest(type: "notification", payload: payload, maxAttempts: 1))
            let applied = try await api.result(job.id)
            #expect(applied["notificationType"] as? String == "CANCEL" && applied["accessGranted"] as? Bool == false, "\(applied)")
            func total(_ metric: String) async throws -> Double { try await Self.total(api, metric, since: start) }
            let price = try await total("grossRevenue")
            #expect(try await total("refundAmount") == price, "the receipt's word: the whole price")

            // The refund job waits its ten minutes; Apple answers again by then.
            let later = try #require(applied["refundJobId"] as? String, "\(applied)")
            #expect(try await api.jobQueue.job(id: later)?.status == .scheduled)
            try await api.simulator("/simulator/faults", method: .DELETE)
            let keys = api.jobQueue.configuration.keys("default")
            try await api.jobQueue.redis.send(["ZADD", keys.scheduled, "0", later])
            _ = try await api.jobQueue.promoteDueJobs(queue: "default")
            let refund = try await api.result(later)
            #expect(refund["revocationPercentage"] as? Int == 25_000, "\(refund)")
            let quarter = Double((Int(price) * 25 + 50) / 100)
            #expect(try await total("refundAmount") == quarter)
            #expect(try await total("netRevenue") == price - quarter)
        }
    }

    @Test(.timeLimit(.minutes(3))) func aHalfSpentConsumableRefundedInFullRecordsTheShortfall() async throws {
        try await APIStack.run("prorated-shortfall", worker: true) { api in
            let customer = "quinn@example.com"
            let bought = try await api.buy("credits.100")
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let spent = try await Self.spend(api, customer, 50, reference: "call-1")
            #expect(spent["outcome"] as? String == "spent" && spent["creditBalance"] as? Int == 50, "\(spent)")
            // The same use again spends nothing; more than is left spends nothing.
            #expect(try await Self.spend(api, customer, 50, reference: "call-1")["creditBalance"] as? Int == 50)
            #expect(try await Self.spend(api, customer, 51, reference: "call-2")["outcome"] as? String == "insufficientCredits")

            let result = try await Self.refund(api, try #require(bought["transactionId"] as? String))
            #expect(result["revocationType"] as? String == "REFUND_FULL" && result["revocationPercentage"] as? Int == 100_000, "\(result)")
            #expect(result["creditsClawedBack"] as? Int == 50 && result["creditShortfall"] as? Int == 50, "\(result)")
            let (balance, entries) = try await Self.ledger(api, customer)
            #expect(balance == 0, "a refund never takes the balance below zero")
            #expect(entries.map { $0["kind"] as? String } == ["purchase", "spend", "clawback"])
            #expect(entries.last?["amount"] as? Int == -50 && entries.last?["shortfall"] as? Int == 50)
            #expect(entries[1]["reference"] as? String == "call-1")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aReversalRestoresExactlyWhatTheRefundTook() async throws {
        try await APIStack.run("prorated-reversal", worker: true) { api in
            let customer = "rory@example.com"
            let bought = try await api.buy("credits.100", extra: ["quantity": 3])
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let id = try #require(bought["transactionId"] as? String)
            _ = try await Self.spend(api, customer, 250, reference: "calls")
            // Two thirds of 300 is 200; 50 are left, so 50 are taken and 150 are short.
            let refunded = try await Self.refund(api, id, "refund", #"{"percentage":66667}"#)
            #expect(refunded["creditsClawedBack"] as? Int == 50 && refunded["creditShortfall"] as? Int == 150, "\(refunded)")
            #expect(try await Self.ledger(api, customer).balance == 0)

            let reversed = try await Self.refund(api, id, "refund-reversed")
            #expect(reversed["refunded"] as? Bool == false)
            #expect(reversed["revocationType"] == nil && reversed["revocationPercentage"] == nil, "\(reversed)")
            #expect(reversed["creditsClawedBack"] as? Int == -50, "\(reversed)")
            let (balance, entries) = try await Self.ledger(api, customer)
            #expect(balance == 50, "the 50 taken come back, not the 150 spent")
            #expect(entries.map { $0["kind"] as? String } == ["purchase", "spend", "clawback", "reinstatement"])
            #expect(entries.map { $0["amount"] as? Int } == [300, -250, -50, 50])
        }
    }
}
