import EntitleCore
import EntitlementJobs
import Foundation
import HTTPTestSupport
import JobQueue
import RedisTestSupport
import Testing

/// Notifications Apple sent that never arrived, brought in by a `reconcile` job from Get
/// Notification History. Two publishers live the same script at the same simulated
/// moments (the clock is frozen between steps): `demo` receives every notification; `keep`
/// receives none (the simulator's delivery to its app is off: every attempt fails, as an
/// unreachable server), until one reconcile. Then each of keep's customers equals demo's
/// namesake (document, ledger, events), and a second reconcile queues nothing.
@Suite struct ReconcileFlowTests {
    static let day: Double = 86_400
    static let customers = ["sam@example.com", "cal@example.com", "bea@example.com"]

    /// What a customer's answer says, without what differs between the two publishers by
    /// construction (ids Apple gave, bundle and product names, versions).
    static func projection(_ value: Any) -> Any {
        switch value {
        case let object as [String: Any]:
            var kept: [String: Any] = [:]
            for (key, item) in object
            where
                !(key.hasSuffix("Id") || key.hasSuffix("Ids") || key == "id" || key.lowercased().contains("version")
                || key == "publisher" || key == "latestTransactionId" || key == "next")
            {
                kept[key] = projection(item)
            }
            return kept
        case let array as [Any]: return array.map(projection)
        case let text as String: return text.replacingOccurrences(of: "com.entitle.keep", with: "com.entitle.demo")
        default: return value
        }
    }

    static func json(_ value: Any) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }

    @Test(.timeLimit(.minutes(6))) func oneReconcileBringsEveryMissedNotificationAndASecondChangesNothing() async throws {
        try await APIStack.run("reconcile", worker: true, notify: ["demo"]) { api in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            let started = try await api.simulatorNow()
            let tokens = ["demo": APIStack.demoToken, "keep": APIStack.keepToken]
            // keep's app is unreachable for Apple from the start.
            try await api.simulator("/simulator/notifications/delivery", #"{"enabled":false,"bundleId":"com.entitle.keep"}"#)

            var subscriptions: [String: String] = [:]
            var credits: [String: String] = [:]
            var books: [String: String] = [:]
            for publisher in ["demo", "keep"] {
                func bought(_ product: String, _ customer: String, _ extra: [String: Any] = [:]) async throws -> [String: Any] {
                    let bought = try await api.buy(
                        product, publisher: publisher, extra: extra.merging(["environment": "Production"]) { $1 })
                    _ = try await api.claim(
                        ["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)],
                        token: tokens[publisher]!)
                    return bought
                }
                subscriptions[publisher] = try #require(
                    try await bought("premium.monthly", "sam@example.com", ["useIntroductoryOffer": false])["originalTransactionId"]
                        as? String)
                credits[publisher] = try #require(try await bought("credits.100", "cal@example.com")["transactionId"] as? String)
                books[publisher] = try #require(try await bought("issue.2026.11", "bea@example.com")["transactionId"] as? String)
            }
            try await api.settle()
            // What a worker's renewal sweep does as time passes: Entitle asks Apple about each
            // subscription whose period ended (the test's clock jumps; its scheduled checks
            // are due in days of wall time).
            let sweep = RenewalSweep(
                service: EntitlementService(configuration: api.settings, jobQueue: api.jobQueue, logger: TestRedis.logger),
                queue: "default", interval: .seconds(1), logger: TestRedis.logger)
            func advance(days: Double) async throws {
                try await api.advance(seconds: days * Self.day)
                try await api.settle()
                try await sweep.sweep()
                try await api.settle()
            }
            // The same script for both, step by step at the same moments.
            func both(_ step: (String) async throws -> Void) async throws {
                for publisher in ["demo", "keep"] { try await step(publisher) }
                try await api.settle()
            }
            try await advance(days: 31)  // a renewal
            try await both { try await api.simulator("/simulator/subscriptions/\(subscriptions[$0]!)/auto-renew-off", "{}") }
            try await both { try await api.simulator("/simulator/transactions/\(credits[$0]!)/refund", #"{"percentage":50000}"#) }
            try await both { try await api.simulator("/simulator/transactions/\(books[$0]!)/refund", "{}") }

            func answer(_ publisher: String, _ customer: String) async throws -> String {
                try await Self.answer(api, tokens[publisher]!, customer)
            }
            func same(_ when: String) async throws {
                for customer in Self.customers {
                    let kept = try await answer("keep", customer)
                    let delivered = try await answer("demo", customer)
                    #expect(kept == delivered, "\(customer) \(when):\nkeep \(kept)\ndemo \(delivered)")
                }
            }
            #expect(try await answer("keep", "cal@example.com") != (try await answer("demo", "cal@example.com")), "keep missed the refund")
            // Apple's history says each of keep's notifications failed.
            let sent = try #require(try await api.simulatorJSON("/simulator/notifications") as? [[String: Any]])
            let keeps = sent.filter { ($0["bundleId"] as? String) == "com.entitle.keep" }
            #expect(!keeps.isEmpty && keeps.allSatisfy { $0["delivered"] as? Bool == false }, "\(keeps)")

            // One reconcile from the start of the script.
            func reconcile(since: Date?) async throws -> [String: Any] {
                let job = try await api.jobQueue.enqueue(
                    try EnqueueRequest(JobPayloads.Reconcile(publisher: "keep", since: since), queue: "default"))
                let result = try await api.result(job.id, token: APIStack.keepToken)
                try await api.settle()
                return try #require((result["stretches"] as? [[String: Any]])?.first { $0["environment"] as? String == "Production" })
            }
            let first = try await reconcile(since: started.addingTimeInterval(-60))
            let queued = try #require(first["queued"] as? Int)
            #expect(queued == keeps.count && first["seen"] as? Int == keeps.count && first["invalid"] as? Int == 0, "\(first)")
            try await same("after the reconcile")

            // The subscription ends; keep learns it from Apple's statuses, demo from the notification.
            try await advance(days: 31)
            try await same("at the end")
            let ended = try await answer("keep", "sam@example.com")
            // The next reconcile starts where the first ended: its notification is applied and changes nothing.
            let second = try await reconcile(since: nil)
            #expect(second["queued"] as? Int == 1 && second["alreadyApplied"] as? Int ?? 0 >= 1, "\(second)")
            #expect(try await answer("keep", "sam@example.com") == ended)
            try await same("after the second reconcile")
            // Everything from the start again (Apple keeps 180 days): all of it found applied.
            let third = try await reconcile(since: started.addingTimeInterval(-60))
            #expect(
                third["queued"] as? Int == 0 && third["alreadyQueued"] as? Int == 0 && third["alreadyApplied"] as? Int == queued + 1,
                "\(third)")
        }
    }
}

extension ReconcileFlowTests {
    /// A reconcile killed after its first page resumes with the page it saved (Apple pages by
    /// 20 and asks for the same request with the token); Apple's refusals end the job with
    /// their code at once, not in a retry loop.
    @Test(.timeLimit(.minutes(4))) func aReconcileResumesFromItsSavedPageAndAppleRefusalsFailIt() async throws {
        try await APIStack.run("reconcile-resume", worker: true) { api in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            let started = try await api.simulatorNow()
            try await api.simulator("/simulator/notifications/delivery", #"{"enabled":false,"bundleId":"com.entitle.keep"}"#)
            for _ in 0..<25 { _ = try await api.buy("credits.100", publisher: "keep", extra: ["environment": "Production"]) }
            func reconcile(since: Date? = nil) async throws -> [String: Any] {
                let job = try await api.jobQueue.enqueue(
                    try EnqueueRequest(JobPayloads.Reconcile(publisher: "keep", since: since), queue: "default"))
                let result = try await api.result(job.id, token: APIStack.keepToken)
                try await api.settle()
                return try #require((result["stretches"] as? [[String: Any]])?.first { $0["environment"] as? String == "Production" })
            }
            // As a job killed after its first page leaves it: the window and the second page's
            // token (the simulator's tokens are the offset, base64).
            let store = EntitlementStore(redis: api.jobQueue.redis, prefix: api.jobQueue.configuration.prefix, logger: TestRedis.logger)
            let now = try await api.simulatorNow()
            try await store.saveReconcileCursor(
                ReconcileCursor(
                    start: started.addingTimeInterval(-60), end: now.addingTimeInterval(60), token: Data("20".utf8).base64EncodedString()),
                publisher: "keep", bundleId: "com.entitle.keep", environment: "Production")
            let resumed = try await reconcile()
            #expect(resumed["seen"] as? Int == 5 && resumed["queued"] as? Int == 5 && resumed["pages"] as? Int == 1, "\(resumed)")
            let cursor = try await store.reconcileCursor(publisher: "keep", bundleId: "com.entitle.keep", environment: "Production")
            #expect(cursor.token == nil && cursor.start == nil && cursor.through != nil, "finished: \(cursor)")
            // The next starts an hour before where that one ended: the first 20 come in, the last 5 are applied already.
            let next = try await reconcile()
            #expect(next["seen"] as? Int == 25 && next["queued"] as? Int == 20 && next["alreadyApplied"] as? Int == 5, "\(next)")
            #expect(next["pages"] as? Int == 2)
            // A window an operator names moves the position only when it joins on: one that
            // leaves a gap after it leaves it as it was (the gap is still to be reconciled).
            let behind = ReconcileCursor(through: started.addingTimeInterval(-86_400))
            try await store.saveReconcileCursor(behind, publisher: "keep", bundleId: "com.entitle.keep", environment: "Production")
            _ = try await reconcile(since: started)
            #expect(
                try await store.reconcileCursor(publisher: "keep", bundleId: "com.entitle.keep", environment: "Production") == behind)
            _ = try await reconcile(since: started.addingTimeInterval(-2 * 86_400))
            let joined = try await store.reconcileCursor(publisher: "keep", bundleId: "com.entitle.keep", environment: "Production")
            #expect((joined.through ?? .distantPast) > started && joined.token == nil, "\(joined)")

            // Apple refuses (401: the key is wrong, in production and in the sandbox the client
            // falls back to): the job fails at once with Apple's word.
            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":401,"pathContains":"notifications/history","count":2}"#)
            let refused = try await api.jobQueue.enqueue(
                try EnqueueRequest(JobPayloads.Reconcile(publisher: "keep", since: started), queue: "default"))
            let document = try await api.finished(refused.id, token: APIStack.keepToken)
            #expect(document["status"] as? String == "failed" && document["attempt"] as? Int == 1, "\(document)")
            #expect((document["lastError"] as? String ?? "").contains("401"), "\(document)")
            // A bad window is refused before Apple is asked.
            let reversed = try await api.jobQueue.enqueue(
                try EnqueueRequest(JobPayloads.Reconcile(publisher: "keep", since: now, until: started), queue: "default"))
            let bad = try await api.finished(reversed.id, token: APIStack.keepToken)
            #expect(bad["status"] as? String == "failed" && (bad["lastError"] as? String ?? "").contains("since must be before until"))
        }
    }
}

extension ReconcileFlowTests {
    /// Every worker runs the schedule; each publisher's reconcile is queued once per its
    /// interval, on the App Store's clock, and a publisher that says 0 is never reconciled.
    @Test(.timeLimit(.minutes(3))) func theScheduleQueuesOneReconcilePerPublisherPerInterval() async throws {
        try await APIStack.run(
            "reconcile-schedule", worker: true,
            catalog: { publishers in
                for index in publishers.indices where publishers[index]["id"] as? String == "share" {
                    publishers[index]["reconcileIntervalSeconds"] = 0
                }
            }
        ) { api in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            let service = EntitlementService(configuration: api.settings, jobQueue: api.jobQueue, logger: TestRedis.logger)
            let first = ReconcileSchedule(service: service, queue: "default", tick: .seconds(1), logger: TestRedis.logger)
            let second = ReconcileSchedule(service: service, queue: "default", tick: .seconds(1), logger: TestRedis.logger)
            let queued = try await first.schedule()
            #expect(queued.contains("demo") && queued.contains("keep") && !queued.contains("share"), "\(queued)")
            // Another worker in the same interval: nothing new.
            #expect(try await second.schedule().isEmpty)
            try await api.settle()
            #expect(try await first.schedule().isEmpty)
            // The next hour on Apple's clock: each again.
            try await api.advance(seconds: 3600)
            #expect(Set(try await second.schedule()) == Set(queued))
            try await api.settle()
        }
    }
}

extension ReconcileFlowTests {
    /// A customer's document and events as the two publishers' namesakes are compared.
    static func answer(_ api: APIStack, _ token: String, _ customer: String) async throws -> String {
        let document = try await api.customer(customer, at: try await api.simulatorNow().addingTimeInterval(1), token: token)
        let events = try await api.call(
            .GET, "/v1/customers/\(APIStack.escape(customer))/events?limit=100", token: token, route: "GET /v1/customers/{id}/events")
        let types = ((events.json["events"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String }.sorted()
        return json(["document": projection(document), "events": types])
    }

    /// `POST /v1/customers/{id}/resync` rebuilds a customer who missed notifications from
    /// Apple's history and statuses: equal to the namesake who received them, and nothing
    /// the same Apple account bought for nobody here is added.
    @Test(.timeLimit(.minutes(4))) func aResyncRebuildsACustomerFromApplesHistory() async throws {
        try await APIStack.run("resync", worker: true, notify: ["demo"]) { api in
            try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
            try await api.simulator("/simulator/notifications/delivery", #"{"enabled":false,"bundleId":"com.entitle.keep"}"#)
            let tokens = ["demo": APIStack.demoToken, "keep": APIStack.keepToken]
            var subscriptions: [String: String] = [:]
            var credits: [String: String] = [:]
            for publisher in ["demo", "keep"] {
                let account = "account-\(publisher)"
                func bought(_ product: String, _ customer: String?, _ extra: [String: Any] = [:]) async throws -> [String: Any] {
                    let bought = try await api.buy(
                        product, account: account, publisher: publisher, extra: extra.merging(["environment": "Production"]) { $1 })
                    if let customer {
                        _ = try await api.claim(
                            ["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)],
                            token: tokens[publisher]!)
                    }
                    return bought
                }
                subscriptions[publisher] = try #require(
                    try await bought("premium.monthly", "sam@example.com", ["useIntroductoryOffer": false])["originalTransactionId"]
                        as? String)
                credits[publisher] = try #require(try await bought("credits.100", "sam@example.com")["transactionId"] as? String)
                // The same Apple account buys an issue nobody brings here.
                _ = try await bought("issue.2026.11", nil)
            }
            try await api.settle()
            try await api.advance(seconds: 31 * Self.day)
            try await api.settle()
            for publisher in ["demo", "keep"] {
                try await api.simulator("/simulator/subscriptions/\(subscriptions[publisher]!)/auto-renew-off", "{}")
                try await api.simulator("/simulator/transactions/\(credits[publisher]!)/refund", #"{"percentage":50000}"#)
            }
            try await api.settle()
            #expect(
                try await Self.answer(api, APIStack.keepToken, "sam@example.com")
                    != (try await Self.answer(api, APIStack.demoToken, "sam@example.com")))

            let path = "/v1/customers/sam%40example.com/resync"
            let reply = try await api.call(.POST, path, token: APIStack.keepToken, route: "POST /v1/customers/{id}/resync")
            try #require(reply.status == 202, "\(reply.text)")
            let result = try await api.result(try #require(reply.json["jobId"] as? String), token: APIStack.keepToken)
            try await api.settle()
            #expect(result["changed"] as? Bool == true && (result["purchases"] as? [String])?.count == 2, "\(result)")
            let kept = try await Self.answer(api, APIStack.keepToken, "sam@example.com")
            let delivered = try await Self.answer(api, APIStack.demoToken, "sam@example.com")
            #expect(kept == delivered, "keep \(kept)\ndemo \(delivered)")
            #expect(!kept.contains("issue:2026-11"), "the account's other purchase is nobody's here")
            // Again: nothing changes.
            let again = try await api.call(.POST, path, token: APIStack.keepToken, route: "POST /v1/customers/{id}/resync")
            let second = try await api.result(try #require(again.json["jobId"] as? String), token: APIStack.keepToken)
            #expect(second["changed"] as? Bool == false, "\(second)")
            #expect(try await Self.answer(api, APIStack.keepToken, "sam@example.com") == kept)
            // An unknown customer is a 404; an app key may not ask.
            #expect(try await api.call(.POST, "/v1/customers/nobody%40example.com/resync", token: APIStack.keepToken).status == 404)
            #expect(try await api.call(.POST, path, token: APIStack.appKey).status == 403)
        }
    }
}
