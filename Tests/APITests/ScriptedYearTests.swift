import AsyncHTTPClient
import DurationUnits
import EntitleCore
import Entitlements
import Foundation
import NIOCore
import RedisTestSupport
import Reporting
import Testing

/// A year of a small publisher through the simulator's time: hundreds of customers on a seeded
/// random walk of trials, purchases, renewals, upgrades and downgrades, cancellations and
/// uncancellations, billing failures and recoveries, resubscriptions, refunds, transfers and
/// credits. Every figure the reports give, every day, equals a reference computed here from the
/// simulator's own records (its subscriptions' histories, its signed transactions) and the
/// walk's own spends, with none of Entitle's code; a rebuild from the event log equals the
/// figures kept as it went; every notification sent again changes nothing.
@Suite struct ScriptedYearTests {
    static var days: Int { ProcessInfo.processInfo.environment["ENTITLE_YEAR_DAYS"].flatMap { Int($0) } ?? 365 }

    @Test(.timeLimit(.minutes(30))) func everyFigureOfAScriptedYearEqualsTheSimulatorsRecords() async throws {
        try await APIStack.run(
            "year", worker: true, notify: ["demo"], notifyV1: true,
            settings: { settings in
                // While Apple retries billing, only its notifications tell when it stopped (the
                // end of billing retry is Apple's date then, not when a check happened to ask).
                settings.billingRetryCheckInterval = .seconds(100 * 86_400)
            }
        ) { api in
            let seed = ProcessInfo.processInfo.environment["ENTITLE_YEAR_SEED"].flatMap { UInt64($0) } ?? 2_026
            var year = YearWalk(api: api, seed: seed)
            try await year.run(days: Self.days)
            let reference = try await YearReference.compute(year)
            try await api.foldReports()
            let first = ReportCalendar.utc.day(of: year.start)
            let last = ReportCalendar.utc.day(of: year.now)
            var problems: [String] = []
            var compared = 0
            for metric in ReportMetric.allCases {
                let reply = try await api.call(
                    .GET, "/v1/reports/\(metric.rawValue)?from=\(first)&to=\(last)&by=day", route: "GET /v1/reports/{metric}")
                try #require(reply.status == 200, "\(metric): \(reply.text)")
                let points = reply.json["points"] as? [[String: Any]] ?? []
                var got: [String: Double] = [:]
                for point in points {
                    got["\(point["key"] as? String ?? "")|\(point["currency"] as? String ?? "")"] = point["value"] as? Double ?? 0
                }
                let expected = reference.values(metric, from: first, to: last)
                for key in Set(got.keys).union(expected.keys).sorted() {
                    let (a, b) = (got[key] ?? 0, expected[key] ?? 0)
                    compared += 1
                    if abs(a - b) > 1e-9 { problems.append("\(metric.rawValue) \(key): reported \(a), the simulator's records say \(b)") }
                }
            }
            // Breakdowns over the year: revenue by storefront, paying subscriptions by offer at its end.
            for (metric, grouping) in [(ReportMetric.grossRevenue, "storefront"), (.payingSubscriptions, "offer"), (.refunds, "product")] {
                let reply = try await api.call(
                    .GET, "/v1/reports/\(metric.rawValue)?from=\(first)&to=\(last)&by=\(grouping)", route: "GET /v1/reports/{metric}")
                let total = (reply.json["points"] as? [[String: Any]] ?? []).reduce(0.0) { $0 + ($1["value"] as? Double ?? 0) }
                let expected =
                    metric.isLevel ? reference.level(metric, at: last) : reference.values(metric, from: first, to: last).values.reduce(0, +)
                compared += 1
                if abs(total - expected) > 1e-9 { problems.append("\(metric.rawValue) by \(grouping): \(total), expected \(expected)") }
            }
            // Who subscribes where at the year's end: each storefront as Apple signed it (a
            // receipt's view of a transaction, which says no storefront, must not erase it).
            for metric in [ReportMetric.payingSubscriptions, .trialSubscriptions] {
                let reply = try await api.call(
                    .GET, "/v1/reports/\(metric.rawValue)?from=\(last)&to=\(last)&by=storefront", route: "GET /v1/reports/{metric}")
                var got: [String: Double] = [:]
                for point in reply.json["points"] as? [[String: Any]] ?? [] {
                    got[point["key"] as? String ?? "", default: 0] += point["value"] as? Double ?? 0
                }
                got = got.filter { $0.value != 0 }
                compared += 1
                let expected = reference.byStorefront(metric, at: last)
                if got != expected { problems.append("\(metric.rawValue) by storefront: \(got), expected \(expected)") }
            }
            print(
                "scripted year: \(year.customers.count) customers, \(year.subscriptions.count) subscriptions, \(reference.transactions) transactions, \(compared) figures compared, \(problems.count) differ; "
                    + year.tally.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
            if !problems.isEmpty {
                print(try await Self.diagnosis(problems, year: year, reference: reference))
                print(try await Self.flowDiagnosis(problems, year: year))
            }
            #expect(problems.isEmpty, "\(problems.count) figures differ:\n\(problems.prefix(40).joined(separator: "\n"))")
            #expect(year.subscriptions.count >= 200, "hundreds of customers")

            // The log, folded again from its first entry, gives the same figures.
            let demo = try #require(api.settings.catalog.publisher("demo"))
            let differences = try await api.reports.rebuild(demo, use: false)
            #expect(differences.isEmpty, "rebuilt from the log: \(differences.prefix(20))")

            // Every notification Apple sent, sent again: nothing changes, nothing is appended.
            let logBefore = try await year.logLength()
            let figuresBefore = try await api.reports.reports.figures("demo", generation: try await api.reports.reports.generation("demo"))
            let sent = try #require(try await api.simulatorJSON("/simulator/notifications", limit: 1 << 28) as? [[String: Any]])
            for notification in sent {
                guard let uuid = notification["notificationUUID"] as? String else { continue }
                try await api.simulator("/simulator/notifications/\(uuid)/resend", "{}")
            }
            try await api.settle(timeout: .seconds(300))
            try await api.foldReports()
            #expect(try await year.logLength() == logBefore, "a replayed notification appends nothing to the log")
            let figuresAfter = try await api.reports.reports.figures("demo", generation: try await api.reports.reports.generation("demo"))
            #expect(figuresAfter == figuresBefore, "a replayed notification changes no figure")
            print("scripted year: \(sent.count) notifications sent again, \(logBefore) log entries before and after")
        }
    }
}

extension ScriptedYearTests {
    /// For a failure: at the first day a level differs, which subscriptions each side counts.
    static func diagnosis(_ problems: [String], year: YearWalk, reference: YearReference) async throws -> String {
        guard
            let first = problems.first(where: {
                $0.hasPrefix("payingSubscriptions") || $0.hasPrefix("trialSubscriptions") || $0.hasPrefix("gracePeriod")
                    || $0.hasPrefix("billingRetry")
            }),
            let metric = ReportMetric(rawValue: String(first.prefix { $0 != " " })),
            let day = ReportDay(String(first.dropFirst(metric.rawValue.count + 1).prefix(10)))
        else { return "no level differs" }
        let calendar = ReportCalendar.utc
        let midnight = calendar.start(of: calendar.adding(days: 1, to: day))
        let phase: ReportPiece.Phase =
            switch metric {
            case .payingSubscriptions: .paying
            case .trialSubscriptions: .trial
            case .gracePeriodSubscriptions: .grace
            default: .billingRetry
            }
        var entitle: [String: [String]] = [:]
        let store = EntitlementStore(
            redis: year.api.jobQueue.redis, prefix: year.api.jobQueue.configuration.prefix, logger: TestRedis.logger)
        let demo = try #require(year.api.settings.catalog.publisher("demo"))
        for customer in year.customers {
            let state = try await store.load(publisher: "demo", customer: customer).state
            for original in Set(state.transactions.values.map(\.originalTransactionId)) {
                var only = state
                only.transactions = state.transactions.filter { $0.value.originalTransactionId == original }
                only.periods = state.periods.filter { $0.originalTransactionId == original }
                only.billingRetries = state.billingRetries.filter { $0.originalTransactionId == original }
                only.credits = CreditLedger()
                for piece in ReportTimeline.pieces(of: only, publisher: demo)
                where piece.phase == phase && piece.from < midnight && (piece.to.map { $0 >= midnight } ?? true) {
                    entitle[original, default: []].append("\(customer) \(piece.from)-\(piece.to.map { "\($0)" } ?? "")")
                }
            }
        }
        var lines = ["at \(midnight), \(metric.rawValue):"]
        let expected = Set(
            reference.debug.filter { $0.metric == metric && $0.from < midnight && ($0.to.map { $0 >= midnight } ?? true) }.map(\.original))
        let twice = entitle.filter { $0.value.count > 1 }.keys
        for original in Set(entitle.keys).symmetricDifference(expected).union(twice).sorted() {
            lines.append(
                "  \(original): Entitle \(entitle[original] ?? []), the simulator \(expected.contains(original) ? "counts it" : "does not")"
            )
            let snapshot = try await year.api.simulator("/simulator/subscriptions/\(original)")
            for entry in snapshot["history"] as? [[String: Any]] ?? [] {
                lines.append(
                    "    history \(Date(timeIntervalSince1970: (entry["at"] as? Double ?? 0) / 1000)) status \(entry["status"] ?? "") \(entry["transactionId"] ?? "") autoRenew \(entry["autoRenewStatus"] ?? "")"
                )
            }
            for id in snapshot["transactionIds"] as? [String] ?? [] {
                let t = try await YearReference.transaction(year.api, id)
                lines.append(
                    "    \(id) \(t.product) \(t.purchase)-\(t.expires.map { "\($0)" } ?? "") revoked \(t.revoked.map { "\($0)" } ?? "-")")
            }
            for customer in year.customers {
                let state = try await store.load(publisher: "demo", customer: customer).state
                for period in state.periods where period.originalTransactionId == original {
                    lines.append(
                        "    \(customer) period \(period.transactionId) \(period.start)-\(period.end.map { "\($0)" } ?? "") ended \(period.endedAt.map { "\($0)" } ?? "-") \(period.endReason?.rawValue ?? "") released \(period.releasedAt.map { "\($0)" } ?? "-")"
                    )
                }
                for retry in state.billingRetries where retry.originalTransactionId == original {
                    lines.append("    \(customer) retry \(retry.transactionId) \(retry.from)-\(retry.to.map { "\($0)" } ?? "")")
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}

extension ScriptedYearTests {
    /// For a failure: the events behind the first flow that differs, with the histories of their subscriptions.
    static func flowDiagnosis(_ problems: [String], year: YearWalk) async throws -> String {
        let types: [String: String] = [
            "billingRecoveries": "billing_recovered", "renewals": "renewal", "reactivations": "renewal", "churned": "expiration",
            "cancellations": "cancellation", "billingIssues": "billing_issue", "productChanges": "product_change",
            "trialConversions": "trial_converted", "trialExpirations": "expiration",
        ]
        guard
            let first = problems.first(where: { $0.hasPrefix("billingRecoveries") })
                ?? problems.first(where: { types[String($0.prefix { $0 != " " })] != nil })
        else { return "no flow differs" }
        let metric = String(first.prefix { $0 != " " })
        let day = String(first.dropFirst(metric.count + 1).prefix(10))
        var lines = ["flow \(metric) on \(day):"]
        for customer in year.customers {
            for event in try await year.api.events(customer)
            where event["type"] as? String == types[metric] && (event["occurredAt"] as? String ?? "").hasPrefix(day) {
                let original = event["originalTransactionId"] as? String ?? ""
                lines.append(
                    "  \(customer) \(event["type"] ?? "") \(event["transactionId"] ?? "") of \(original) resubscribed \(event["resubscribed"] ?? "-")"
                )
                let snapshot = try await year.api.simulator("/simulator/subscriptions/\(original)")
                for entry in snapshot["history"] as? [[String: Any]] ?? [] {
                    lines.append(
                        "    history \(Date(timeIntervalSince1970: (entry["at"] as? Double ?? 0) / 1000)) status \(entry["status"] ?? "") \(entry["transactionId"] ?? "") autoRenew \(entry["autoRenewStatus"] ?? "")"
                    )
                }
                let store = EntitlementStore(
                    redis: year.api.jobQueue.redis, prefix: year.api.jobQueue.configuration.prefix, logger: TestRedis.logger)
                let state = try await store.load(publisher: "demo", customer: customer).state
                for retry in state.billingRetries where retry.originalTransactionId == original {
                    lines.append("    retry \(retry.transactionId) \(retry.from)-\(retry.to.map { "\($0)" } ?? "")")
                }
                for period in state.periods where period.originalTransactionId == original {
                    lines.append(
                        "    period \(period.transactionId) \(period.start)-\(period.end.map { "\($0)" } ?? "") ended \(period.endedAt.map { "\($0)" } ?? "-")"
                    )
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// The walk: one step a day.
struct YearWalk {
    struct Subscription {
        var original: String
        var account: String
        var storefront: String
        var owner: String
        var product: String
        var failing = false
        var autoRenew = true
        var status = 1
    }

    let api: APIStack
    var random: SplitMix64
    var customers: [String] = []
    var subscriptions: [Subscription] = []
    /// One-time purchases (consumables, issues): transaction id -> the customer credited.
    var oneTime: [(transaction: String, customer: String, credits: Int)] = []
    /// Credits the walk spent: customer, amount, when.
    var spends: [(customer: String, amount: Int, at: Date)] = []
    var refunded: Set<String> = []
    var start = Date()
    var now = Date()
    var tally: [String: Int] = [:]

    init(api: APIStack, seed: UInt64) {
        self.api = api
        random = SplitMix64(seed: seed)
    }

    mutating func chance(_ perMille: UInt64) -> Bool { random.next() % 1000 < perMille }
    mutating func pick<T>(_ items: [T]) -> T? { items.isEmpty ? nil : items[Int(random.next() % UInt64(items.count))] }

    mutating func run(days: Int) async throws {
        try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
        // Noon UTC: no step is ever near a day's edge.
        let clock = try await api.simulatorNow()
        let seconds = clock.timeIntervalSince1970
        let noon = (seconds / 86_400).rounded(.down) * 86_400 + 86_400 + 43_200
        try await api.advance(seconds: noon - seconds)
        start = try await api.simulatorNow()
        now = start
        for day in 0..<days {
            try await act()
            try await api.settle(timeout: .seconds(120))
            try await api.advance(seconds: 86_400)
            now = now.addingTimeInterval(86_400)
            try await api.settle(timeout: .seconds(120))
            if day % 3 == 2 { try await refreshStatuses() }
        }
    }

    /// A control call that may be refused (the walk's view of a subscription is a few days
    /// old): the answer, or `nil` when the simulator said no.
    func attempt(_ path: String, _ json: String) async throws -> [String: Any]? {
        var request = HTTPClientRequest(url: api.simulatorURL + path)
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: json))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 24)
        guard (200..<300).contains(Int(response.status.code)) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]) ?? [:]
    }

    /// Says what happened, or that the simulator refused it (counted apart).
    mutating func tried(_ what: String, _ path: String, _ json: String = "{}") async throws -> Bool {
        let done = try await attempt(path, json) != nil
        count(done ? what : "refused " + what)
        return done
    }

    mutating func refreshStatuses() async throws {
        for index in subscriptions.indices where subscriptions[index].status != 2 && subscriptions[index].status != 5 {
            let snapshot = try await api.simulator("/simulator/subscriptions/\(subscriptions[index].original)")
            subscriptions[index].status = snapshot["status"] as? Int ?? 1
            subscriptions[index].product = snapshot["productId"] as? String ?? subscriptions[index].product
            subscriptions[index].autoRenew = snapshot["autoRenewStatus"] as? Bool ?? true
        }
    }

    mutating func count(_ what: String) { tally[what, default: 0] += 1 }

    func claim(_ bought: [String: Any], by customer: String) async throws {
        let result = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        #expect(result["reason"] == nil || result["reason"] is NSNull, "\(customer)'s claim: \(result)")
    }

    mutating func act() async throws {
        // Newcomers: most take the free week, some pay at once, for the monthly, the annual or basic.
        if chance(900) {
            let index = customers.count
            let customer = "c\(index)@example.com"
            customers.append(customer)
            let storefront = chance(300) ? "FRA" : "USA"
            let roll = random.next() % 100
            let product =
                roll < 50 || storefront == "FRA" && roll < 80
                ? "premium.monthly" : roll < 70 || storefront == "FRA" ? "premium.annual" : "basic.monthly"
            let trial = product == "premium.monthly" && roll < 50
            let account = "year-\(index)"
            let bought = try await api.buy(
                product, account: account,
                extra: ["environment": "Production", "storefront": storefront, "useIntroductoryOffer": trial])
            try await claim(bought, by: customer)
            subscriptions.append(
                Subscription(
                    original: try #require(bought["originalTransactionId"] as? String), account: account, storefront: storefront,
                    owner: customer, product: "com.entitle.demo.\(product)"))
            count(trial ? "trials" : "purchases")
        }
        // One-time purchases: calling credits and magazine issues.
        if chance(200), let customer = pick(customers) {
            let credits = chance(700)
            let bought = try await api.buy(
                credits ? "credits.100" : "issue.2026.11", account: "year-one-\(oneTime.count)",
                extra: ["environment": "Production", "storefront": chance(300) ? "FRA" : "USA"])
            try await claim(bought, by: customer)
            oneTime.append((try #require(bought["transactionId"] as? String), customer, credits ? 100 : 0))
            count(credits ? "credits" : "issues")
        }
        // Credits used.
        if chance(150), let (customer, balance) = pick(try await balances().filter { $0.1 >= 10 }) {
            let amount = 10 + Int(random.next() % UInt64(min(50, balance) - 9))
            let reply = try await api.call(
                .POST, "/v1/customers/\(APIStack.escape(customer))/credits/spend",
                json: ["amount": amount, "reference": "spend-\(spends.count)"], route: "POST /v1/customers/{id}/credits/spend")
            let result = try await api.result(try #require(reply.json["jobId"] as? String))
            #expect(result["outcome"] as? String == "spent", "\(result)")
            spends.append((customer, amount, now))
            count("spends")
        }
        // What subscribers do, a few of them each day.
        for index in subscriptions.indices {
            let subscription = subscriptions[index]
            let path = "/simulator/subscriptions/\(subscription.original)"
            let live = [1, 3, 4].contains(subscription.status)
            if live, subscription.autoRenew, chance(12) {
                if try await tried("cancellations", path + "/auto-renew-off") { subscriptions[index].autoRenew = false }
            } else if live, !subscription.autoRenew, chance(100) {
                if try await tried("uncancellations", path + "/auto-renew-on") { subscriptions[index].autoRenew = true }
            } else if subscription.status == 1, !subscription.failing, chance(8) {
                if try await tried("billing failures", path + "/billing-failure") { subscriptions[index].failing = true }
            } else if subscription.failing, chance(60) {
                if try await tried("billing recoveries", path + "/billing-recovery") { subscriptions[index].failing = false }
            } else if subscription.status == 1, subscription.product == "com.entitle.demo.basic.monthly", chance(15) {
                _ = try await tried("upgrades", path + "/upgrade", #"{"productId":"com.entitle.demo.premium.monthly"}"#)
            } else if subscription.status == 1, subscription.product == "com.entitle.demo.premium.monthly",
                subscription.storefront == "USA",
                chance(6)
            {
                _ = try await tried("downgrades", path + "/downgrade", #"{"productId":"com.entitle.demo.basic.monthly"}"#)
            } else if subscription.status == 1, subscription.product == "com.entitle.demo.premium.monthly", chance(4) {
                _ = try await tried("crossgrades", path + "/crossgrade", #"{"productId":"com.entitle.demo.premium.annual"}"#)
            } else if subscription.status == 2, chance(20) {
                // A lapsed subscriber comes back: the same subscription, a new transaction.
                let product = subscription.product
                let body: [String: Any] = [
                    "bundleId": "com.entitle.demo", "productId": product, "appleAccount": subscription.account, "environment": "Production",
                    "storefront": subscription.storefront, "useIntroductoryOffer": false,
                ]
                let json = String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)
                if let bought = try await attempt("/simulator/purchases", json) {
                    try await claim(bought, by: subscription.owner)
                    subscriptions[index].status = 1
                    subscriptions[index].autoRenew = true
                    subscriptions[index].failing = false
                    count("resubscriptions")
                } else {
                    count("refused resubscriptions")
                }
            } else if live, chance(3), let to = pick(customers.filter { $0 != subscription.owner }) {
                _ = try await api.transfer(subscription.original, to: to, from: subscription.owner)
                subscriptions[index].owner = to
                count("transfers")
            } else if live, chance(3) {
                let snapshot = try await api.simulator(path)
                if let latest = (snapshot["transactionIds"] as? [String])?.last, !refunded.contains(latest) {
                    let prorated = chance(500)
                    let body = prorated ? #"{"percentage":\#(1 + random.next() % 99_999)}"# : "{}"
                    if try await tried("subscription refunds", "/simulator/transactions/\(latest)/refund", body) { refunded.insert(latest) }
                }
            }
        }
        if chance(40), let bought = pick(oneTime.filter { !refunded.contains($0.transaction) }) {
            try await api.simulator("/simulator/transactions/\(bought.transaction)/refund", "{}")
            refunded.insert(bought.transaction)
            count("one-time refunds")
        }
    }

    /// Each customer's credits, as the walk's own ledger says (the reference's).
    func balances() async throws -> [(String, Int)] {
        var ledger = YearReference.Ledger()
        for entry in try await YearReference.creditEntries(self) { ledger.apply(entry) }
        return ledger.balances.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// How many entries the demo publisher's event log holds.
    func logLength() async throws -> Int {
        var total = 0
        for partition in 0..<16 {
            let key = "\(api.jobQueue.configuration.prefix):ent:{demo/\(partition < 10 ? "0" : "")\(partition)}:events"
            total += try await api.jobQueue.redis.send(["XLEN", key]).int ?? 0
        }
        return total
    }
}

/// The figures a year should have, from the simulator's records: its subscriptions' histories
/// (every change of state, transaction and renewal preference, dated as it happened), its
/// signed transactions, and the walk's spends. Written from the definitions in
/// docs/entitlements.md ("Reports"), not from Entitle's code.
struct YearReference {
    struct Transaction {
        var id: String
        var original: String
        var product: String
        var purchase: Date
        var expires: Date?
        var price: Int64
        var currency: String
        var storefront: String
        var trial: Bool
        var revoked: Date?
        var percentage: Int
        var kind: String
    }

    struct HistoryEntry {
        var at: Date
        var status: Int
        var transaction: String
        var autoRenew: Bool
        var autoRenewProduct: String
        var intent: Int?
    }

    /// A credit ledger as the documented rules keep it: a refund takes back no more than is left.
    struct Ledger {
        var balances: [String: Int] = [:]
        var clawedBack: [(customer: String, amount: Int, at: Date)] = []

        mutating func apply(_ entry: CreditEntry) {
            switch entry.kind {
            case .granted, .spent: balances[entry.customer, default: 0] += entry.amount
            case .refunded:
                let taken = min(-entry.amount, max(0, balances[entry.customer] ?? 0))
                balances[entry.customer, default: 0] -= taken
                clawedBack.append((entry.customer, taken, entry.at))
            }
        }
    }

    struct CreditEntry {
        enum Kind { case granted, spent, refunded }
        var customer: String
        var amount: Int
        var at: Date
        var kind: Kind
    }

    static let products: [String: (offer: String, months: Int64)] = [
        "com.entitle.demo.premium.monthly": ("premium", 1), "com.entitle.demo.premium.annual": ("premium", 12),
        "com.entitle.demo.basic.monthly": ("basic", 1), "com.entitle.demo.credits.100": ("credits-100", 0),
        "com.entitle.demo.issue.2026.11": ("issue-2026-11", 0),
    ]

    let calendar = ReportCalendar.utc
    /// Per metric, per day, per currency ("" for counts): flows and the changes of levels.
    var flows: [ReportMetric: [ReportDay: [String: Double]]] = [:]
    /// Levels: intervals counted at each midnight they straddle.
    var levels: [(metric: ReportMetric, from: Date, to: Date?, currency: String, value: Double)] = []
    /// The trial and paying stretches again, with the storefront Apple signed the purchase in.
    var storefronts: [(metric: ReportMetric, from: Date, to: Date?, storefront: String)] = []
    var transactions = 0
    /// Which subscription each level's stretch is (for a failure's diagnosis).
    var debug: [(metric: ReportMetric, original: String, from: Date, to: Date?)] = []

    mutating func flow(_ metric: ReportMetric, _ date: Date, _ value: Double = 1, currency: String = "") {
        flows[metric, default: [:]][calendar.day(of: date), default: [:]][metric.isMoney ? currency : "", default: 0] += value
    }

    static func transaction(_ api: APIStack, _ id: String) async throws -> Transaction {
        let snapshot = try await api.simulator("/simulator/transactions/\(id)")
        let jws = try #require(snapshot["signedTransaction"] as? String)
        let payload = try #require(Walk.payload(jws))
        func date(_ key: String) -> Date? { (payload[key] as? Double).map { Date(timeIntervalSince1970: $0 / 1000) } }
        return Transaction(
            id: id, original: payload["originalTransactionId"] as? String ?? id, product: payload["productId"] as? String ?? "",
            purchase: try #require(date("purchaseDate")), expires: date("expiresDate"), price: Int64(payload["price"] as? Double ?? 0),
            currency: payload["currency"] as? String ?? "", storefront: payload["storefront"] as? String ?? "",
            trial: payload["offerDiscountType"] as? String == "FREE_TRIAL", revoked: date("revocationDate"),
            percentage: payload["revocationPercentage"] as? Int ?? 100_000, kind: payload["type"] as? String ?? "")
    }

    /// The walk's credits: purchases, spends, refunds, in time order.
    static func creditEntries(_ walk: YearWalk) async throws -> [CreditEntry] {
        var entries: [CreditEntry] = []
        for bought in walk.oneTime where bought.credits > 0 {
            let transaction = try await transaction(walk.api, bought.transaction)
            entries.append(CreditEntry(customer: bought.customer, amount: bought.credits, at: transaction.purchase, kind: .granted))
            if let revoked = transaction.revoked {
                entries.append(CreditEntry(customer: bought.customer, amount: -bought.credits, at: revoked, kind: .refunded))
            }
        }
        for spend in walk.spends {
            entries.append(CreditEntry(customer: spend.customer, amount: -spend.amount, at: spend.at, kind: .spent))
        }
        return entries.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
    }

    /// `amount × milliunits / 100000`, rounded half up.
    static func share(_ amount: Int64, _ milliunits: Int) -> Int64 { (amount * Int64(milliunits) + 50_000) / 100_000 }

    static func compute(_ walk: YearWalk) async throws -> YearReference {
        var reference = YearReference()
        let api = walk.api
        // One-time purchases: revenue, refunds.
        for bought in walk.oneTime {
            let transaction = try await transaction(api, bought.transaction)
            reference.transactions += 1
            reference.flow(.grossRevenue, transaction.purchase, Double(transaction.price), currency: transaction.currency)
            if let revoked = transaction.revoked {
                reference.flow(.refunds, revoked)
                reference.flow(
                    .refundAmount, revoked, Double(share(transaction.price, transaction.percentage)), currency: transaction.currency)
            }
        }
        // Credits: granted, spent, clawed back, and who holds some at each midnight.
        var ledger = Ledger()
        var holding: [String: Date] = [:]
        for entry in try await creditEntries(walk) {
            let before = ledger.balances[entry.customer] ?? 0
            ledger.apply(entry)
            let after = ledger.balances[entry.customer] ?? 0
            switch entry.kind {
            case .granted: reference.flow(.creditsGranted, entry.at, Double(entry.amount))
            case .spent: reference.flow(.creditsSpent, entry.at, Double(-entry.amount))
            case .refunded: reference.flow(.creditsClawedBack, entry.at, Double(ledger.clawedBack.last?.amount ?? 0))
            }
            if before <= 0, after > 0 { holding[entry.customer] = entry.at }
            if before > 0, after <= 0, let since = holding.removeValue(forKey: entry.customer) {
                reference.levels.append((.customersWithCredits, since, entry.at, "", 1))
            }
        }
        for (_, since) in holding { reference.levels.append((.customersWithCredits, since, nil, "", 1)) }

        // Subscriptions, from each one's history.
        for subscription in walk.subscriptions {
            let snapshot = try await api.simulator("/simulator/subscriptions/\(subscription.original)")
            var chain: [String: Transaction] = [:]
            for id in snapshot["transactionIds"] as? [String] ?? [] { chain[id] = try await transaction(api, id) }
            reference.transactions += chain.count
            let history = (snapshot["history"] as? [[String: Any]] ?? []).map { entry in
                HistoryEntry(
                    at: Date(timeIntervalSince1970: (entry["at"] as? Double ?? 0) / 1000), status: entry["status"] as? Int ?? 0,
                    transaction: entry["transactionId"] as? String ?? "", autoRenew: entry["autoRenewStatus"] as? Bool ?? false,
                    autoRenewProduct: entry["autoRenewProductId"] as? String ?? "", intent: entry["expirationIntent"] as? Int)
            }
            reference.add(history: history, chain: chain)
        }
        return reference
    }

    mutating func add(history: [HistoryEntry], chain: [String: Transaction]) {
        // Levels: each stretch between two entries, by the state and transaction it began with.
        for (index, entry) in history.enumerated() {
            let to = index + 1 < history.count ? history[index + 1].at : nil
            guard let transaction = chain[entry.transaction], to.map({ $0 > entry.at }) ?? true else { continue }
            let metric: ReportMetric? =
                switch entry.status {
                case 1: transaction.trial ? .trialSubscriptions : .payingSubscriptions
                case 4: .gracePeriodSubscriptions
                case 3: .billingRetrySubscriptions
                default: nil
                }
            if let metric { debug.append((metric, transaction.original, entry.at, to)) }
            switch entry.status {
            case 1:
                storefronts.append((transaction.trial ? .trialSubscriptions : .payingSubscriptions, entry.at, to, transaction.storefront))
                if transaction.trial {
                    levels.append((.trialSubscriptions, entry.at, to, "", 1))
                } else {
                    levels.append((.payingSubscriptions, entry.at, to, "", 1))
                    let months = Self.products[transaction.product]?.months ?? 1
                    levels.append((.mrr, entry.at, to, transaction.currency, Double((transaction.price + months / 2) / months)))
                }
            case 4: levels.append((.gracePeriodSubscriptions, entry.at, to, "", 1))
            case 3: levels.append((.billingRetrySubscriptions, entry.at, to, "", 1))
            default: break
            }
        }
        // Flows from the transactions, oldest first.
        let ordered = chain.values.sorted { ($0.purchase, $0.id) < ($1.purchase, $1.id) }
        for (index, transaction) in ordered.enumerated() {
            let money = Double(transaction.price)
            if let revoked = transaction.revoked {
                flow(.refunds, revoked)
                flow(.refundAmount, revoked, Double(Self.share(transaction.price, transaction.percentage)), currency: transaction.currency)
            }
            guard index > 0 else {
                if transaction.trial {
                    flow(.newTrials, transaction.purchase)
                } else {
                    flow(.newPaidSubscriptions, transaction.purchase)
                    flow(.grossRevenue, transaction.purchase, money, currency: transaction.currency)
                }
                continue
            }
            let previous = ordered[index - 1]
            let previousExpires = previous.expires ?? previous.purchase
            flow(.grossRevenue, transaction.purchase, money, currency: transaction.currency)
            if transaction.product != previous.product, transaction.purchase < previousExpires {
                flow(.productChanges, transaction.purchase)
                continue
            }
            // Billing that had failed went through when the state just before was grace or retry.
            // (An entry at the very moment of the purchase counts when it is the state before it.)
            let stateBefore = history.last { $0.at <= transaction.purchase && $0.transaction != transaction.id }?.status
            let recovered = stateBefore == 3 || stateBefore == 4
            let lapsed = !recovered && transaction.purchase > previousExpires
            if previous.trial, !transaction.trial, !lapsed {
                flow(.trialConversions, transaction.purchase)
                flow(.newPaidSubscriptions, transaction.purchase)
            } else if lapsed {
                flow(.reactivations, transaction.purchase)
            } else {
                flow(.renewals, transaction.purchase)
            }
            if recovered { flow(.billingRecoveries, transaction.purchase) }
        }
        // Flows from the changes of state and renewal preference.
        for (previous, entry) in zip(history, history.dropFirst()) {
            let current = chain[entry.transaction]
            if previous.autoRenew, !entry.autoRenew, [1, 3, 4].contains(entry.status) { flow(.cancellations, entry.at) }
            if !previous.autoRenew, entry.autoRenew { flow(.uncancellations, entry.at) }
            if entry.autoRenewProduct != previous.autoRenewProduct, entry.autoRenewProduct != current?.product {
                flow(.productChanges, entry.at)
            }
            if previous.status == 1, [3, 4].contains(entry.status) { flow(.billingIssues, entry.at) }
            if [2, 5].contains(entry.status), [1, 3, 4].contains(previous.status) {
                if current?.trial == true {
                    flow(.trialExpirations, entry.at)
                } else {
                    flow(.churned, entry.at)
                    if entry.status == 2, entry.intent == 1 || entry.intent == 3 { flow(.churnedVoluntary, entry.at) }
                    if entry.status == 2, entry.intent == 2 { flow(.churnedInvoluntary, entry.at) }
                }
            }
        }
    }

    /// A level metric at the end of a day: the stretches going on at the midnight after it.
    func level(_ metric: ReportMetric, at day: ReportDay, currency: String? = nil) -> Double {
        switch metric {
        case .activeSubscriptions:
            return [.payingSubscriptions, .trialSubscriptions, .gracePeriodSubscriptions].reduce(0) { $0 + level($1, at: day) }
        case .arr: return 12 * level(.mrr, at: day, currency: currency)
        default:
            let midnight = calendar.start(of: calendar.adding(days: 1, to: day))
            return levels.filter { item in
                item.metric == metric && (currency.map { item.currency == $0 } ?? true) && item.from < midnight
                    && (item.to.map { $0 >= midnight } ?? true)
            }.reduce(0) { $0 + $1.value }
        }
    }

    /// Trial or paying subscriptions at the end of a day, by storefront.
    func byStorefront(_ metric: ReportMetric, at day: ReportDay) -> [String: Double] {
        let midnight = calendar.start(of: calendar.adding(days: 1, to: day))
        var counts: [String: Double] = [:]
        for item in storefronts where item.metric == metric && item.from < midnight && (item.to.map { $0 >= midnight } ?? true) {
            counts[item.storefront, default: 0] += 1
        }
        return counts
    }

    func flow(_ metric: ReportMetric, on day: ReportDay, currency: String) -> Double { flows[metric]?[day]?[currency] ?? 0 }

    /// Every value of a metric by day (`yyyy-mm-dd|currency`), as the report gives it.
    func values(_ metric: ReportMetric, from: ReportDay, to: ReportDay) -> [String: Double] {
        var values: [String: Double] = [:]
        let currencies = Set(levels.map(\.currency) + flows.values.flatMap { $0.values.flatMap(\.keys) }).filter { !$0.isEmpty }
        for day in calendar.days(from: from, to: to) {
            for currency in metric.isMoney ? currencies.sorted() : [""] {
                let value: Double
                switch metric {
                case .mrr, .arr: value = level(metric, at: day, currency: currency)
                case .netRevenue:
                    value = flow(.grossRevenue, on: day, currency: currency) - flow(.refundAmount, on: day, currency: currency)
                case .trialConversionRate:
                    let converted = flow(.trialConversions, on: day, currency: "")
                    let ended = converted + flow(.trialExpirations, on: day, currency: "")
                    value = ended > 0 ? converted / ended : 0
                default: value = metric.isLevel ? level(metric, at: day) : flow(metric, on: day, currency: currency)
                }
                values["\(day)|\(currency)"] = value
            }
        }
        return values
    }
}
