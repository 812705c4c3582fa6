import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// Apple's notifications come in any order: the same steps at the simulator, their
/// notifications held and then delivered as sent or reversed, leave each customer the same
/// lifecycle events (the same types, reasons and transactions) and the same access.
@Suite struct NotificationOrderTests {
    static let day = 86_400.0

    /// What an event says, without when it was learnt; a transaction is named by its place
    /// among the customer's (the first bought is `t0`).
    static func summary(_ events: [[String: Any]]) -> [String] {
        let transactions = Set(events.compactMap { $0["transactionId"] as? String }).sorted { ($0.count, $0) < ($1.count, $1) }
        return events.map { event in
            [
                event["type"] as? String ?? "?",
                (event["transactionId"] as? String).flatMap { transactions.firstIndex(of: $0) }.map { "t\($0)" } ?? "-",
                event["reason"] as? String ?? "-",
                (event["resubscribed"] as? Bool).map { "resubscribed=\($0)" } ?? "-",
            ].joined(separator: " ")
        }.sorted()
    }

    /// Runs `steps` for one customer per delivery order, with the notifications they make held
    /// until the steps are done; each customer's events and access.
    static func inBothOrders(
        _ name: String, before: @escaping @Sendable (APIStack, String, String) async throws -> Void = { _, _, _ in },
        _ steps: @escaping @Sendable (APIStack, _ original: String, _ account: String) async throws -> Void
    ) async throws -> [String: (events: [String], access: Bool)] {
        let seen = Seen()
        try await APIStack.run(name, worker: true, notify: ["demo"]) { api in
            for order in ["sent", "reversed"] {
                let customer = "\(order)@example.com"
                let account = "account-\(order)"
                let bought = try await api.buy(
                    "premium.monthly", account: account, extra: ["environment": "Production", "useIntroductoryOffer": false])
                let original = try #require(bought["originalTransactionId"] as? String)
                _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
                try await api.settle()
                try await before(api, original, account)
                try await api.simulator("/simulator/notifications/hold", "{}")
                try await steps(api, original, account)
                try await api.simulator("/simulator/notifications/release", #"{"order":"\#(order)"}"#)
                try await api.settle()
                let access = try await api.call(.GET, "/v1/customers/\(APIStack.escape(customer))/entitlements")
                let granted = (access.json["entitlements"] as? [Any])?.isEmpty == false
                let events = summary(try await api.events(customer))
                await seen.record(order, events, granted)
            }
        }
        return await seen.orders
    }

    actor Seen {
        var orders: [String: (events: [String], access: Bool)] = [:]
        func record(_ order: String, _ events: [String], _ access: Bool) { orders[order] = (events, access) }
    }

    /// A renewal, then a prorated refund of the period before it: the refund of a period that
    /// is not the latest ends nothing, even when it is told before the renewal.
    @Test(.timeLimit(.minutes(3))) func aRefundOfAnEarlierPeriodToldBeforeItsRenewalEndsNothing() async throws {
        let seen = try await Self.inBothOrders("order-refund") { api, original, _ in
            let first = try #require(
                (try await api.simulator("/simulator/subscriptions/\(original)")["transactionIds"] as? [String])?.first)
            try await api.simulator("/simulator/subscriptions/\(original)/renew", "{}")
            try await api.simulator("/simulator/transactions/\(first)/refund", #"{"percentage":25000}"#)
        }
        let sent = try #require(seen["sent"])
        let reversed = try #require(seen["reversed"])
        #expect(!sent.events.contains { $0.hasPrefix("expiration") } && sent.access, "\(sent.events)")
        #expect(reversed.events == sent.events, "reversed: \(reversed.events)\nsent: \(sent.events)")
        #expect(reversed.access)
    }

    /// A backlog of renewals told late (the receiver was down while Apple renewed three
    /// times), in the order Apple sent them: each renewal is applied when its period is already
    /// over, and none of them is taken for the end of the subscription. They are posted one at
    /// a time: posted together, their jobs may run in any order, and a renewal applied before
    /// the one before it looks like a resubscription (left alone: nothing in Apple's data says
    /// whether a gap was a lapse).
    @Test(.timeLimit(.minutes(3))) func aBacklogOfRenewalsEndsNothing() async throws {
        try await APIStack.run("order-backlog", worker: true) { api in
            let customer = "ann@example.com"
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
            _ = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let told = Set(try await NotificationTypesFlowTests.all(api))
            try await api.advance(seconds: 95 * Self.day)
            let backlog = try await NotificationTypesFlowTests.all(api).filter { !told.contains($0) }
            #expect(backlog.count == 3, "three renewals: \(backlog)")
            for uuid in backlog { _ = try await api.forward(try await api.sentNotification(uuid)) }
            try await api.settle()
            let events = Self.summary(try await api.events(customer))
            #expect(events == ["initial_purchase t0 - -", "renewal t1 - -", "renewal t2 - -", "renewal t3 - -"], "\(events)")
            let access = try await api.call(.GET, "/v1/customers/\(APIStack.escape(customer))/entitlements")
            #expect((access.json["entitlements"] as? [Any])?.isEmpty == false, "\(access.text)")
        }
    }

    /// The customer turned auto-renew off, the period ended, and they bought again: the
    /// lapse and the resubscription are told whichever of Apple's EXPIRED and SUBSCRIBED
    /// comes first.
    @Test(.timeLimit(.minutes(3))) func aLapseAndAResubscriptionAreToldInEitherOrder() async throws {
        let seen = try await Self.inBothOrders(
            "order-resubscribe",
            before: { api, original, _ in
                try await api.simulator("/simulator/subscriptions/\(original)/auto-renew-off", "{}")
                try await api.settle()
            }
        ) { api, _, account in
            try await api.advance(seconds: 32 * Self.day)
            _ = try await api.buy("premium.monthly", account: account, extra: ["environment": "Production", "useIntroductoryOffer": false])
        }
        let sent = try #require(seen["sent"])
        let reversed = try #require(seen["reversed"])
        #expect(sent.events.contains { $0.hasPrefix("expiration") && $0.contains("voluntary") }, "\(sent.events)")
        #expect(sent.events.contains { $0.hasPrefix("renewal") && $0.contains("resubscribed=true") }, "\(sent.events)")
        #expect(reversed.events == sent.events, "reversed: \(reversed.events)\nsent: \(sent.events)")
        #expect(reversed.access && sent.access)
    }
}
