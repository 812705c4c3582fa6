import Entitlements
import Foundation
import Reporting
import Testing

/// The fold and the queries against references computed here by brute force: every running
/// total is the number of pieces going on at each midnight, whatever order the deltas came in.
@Suite struct ReportFoldTests {
    /// Figures kept in memory, as Redis keeps them.
    final class MemorySource: ReportSource, @unchecked Sendable {
        // Filled before a query runs and only read while it does: no lock needed.
        var buckets: [ReportBucket: [String: Int64]] = [:]

        func add(_ increments: [ReportIncrement]) {
            for (bucket, fields) in ReportBucket.merge(increments) {
                for (field, value) in fields {
                    buckets[bucket, default: [:]][field, default: 0] += value
                    if buckets[bucket]?[field] == 0 { buckets[bucket]?[field] = nil }
                }
            }
        }

        func fields(of buckets: [ReportBucket]) async throws -> [[String: Int64]] { buckets.map { self.buckets[$0] ?? [:] } }

        func firstMonth() async throws -> Int? {
            buckets.keys.map(\.month).min()
        }
    }

    static let calendar = ReportCalendar.utc
    static let start = Date(timeIntervalSince1970: 1_790_000_000)  // 2026-09-21T13:33:20Z

    @Test func civilDaysAgreeWithFoundationsCalendar() throws {
        var gregorian = Calendar(identifier: .gregorian)
        let paris = try #require(TimeZone(identifier: "Europe/Paris"))
        gregorian.timeZone = paris
        let local = ReportCalendar(timeZone: paris)
        var date = Date(timeIntervalSince1970: 946_684_800)  // 2000-01-01
        for _ in 0..<3_000 {
            let parts = gregorian.dateComponents([.year, .month, .day, .weekday], from: date)
            let day = local.day(of: date)
            #expect(day == ReportDay(year: try #require(parts.year), month: try #require(parts.month), day: try #require(parts.day)))
            #expect(ReportCalendar.civil(ReportCalendar.ordinal(day)) == day)
            // Monday is weekday 2 in Foundation's numbering.
            let back = (try #require(parts.weekday) + 5) % 7
            #expect(local.week(of: day) == local.adding(days: -back, to: day))
            #expect(local.day(of: local.start(of: day)) == day, "a day's first instant is in it")
            date = date.addingTimeInterval(86_400 * 3 + 3_917)
        }
        #expect(ReportDay("2024-02-29") != nil && ReportDay("2026-02-29") == nil && ReportDay("2026-13-01") == nil)
        #expect(ReportDay("26-01-01") == nil && ReportDay("2026-1-01") == nil && ReportDay("+026-01-01") == nil)
    }

    @Test func aPricesMonthIsNormalisedByThePeriodItWasBoughtFor() {
        func fact(days: Double, price: String, environment: String = "Production") -> PurchaseFact {
            PurchaseFact(
                transactionId: "1", originalTransactionId: "1", productId: "p", bundleId: "b", kind: .autoRenewable,
                environment: environment, purchaseDate: Self.start, expiresDate: Self.start.addingTimeInterval(days * 86_400),
                price: price, currency: "USD")
        }
        #expect(ReportTimeline.monthly(fact(days: 7, price: "7.99"), offer: nil) == 34_623)  // 7990 × 52 / 12 = 34623.3
        #expect(ReportTimeline.monthly(fact(days: 31, price: "9.99"), offer: nil) == 9_990)
        #expect(ReportTimeline.monthly(fact(days: 28, price: "9.99"), offer: nil) == 9_990)
        #expect(ReportTimeline.monthly(fact(days: 91, price: "24.99"), offer: nil) == 8_330)
        #expect(ReportTimeline.monthly(fact(days: 365, price: "99.99"), offer: nil) == 8_333)  // 8332.5, halves up
        #expect(ReportTimeline.monthly(fact(days: 366, price: "99.99"), offer: nil) == 8_333)
        #expect(ReportTimeline.monthly(fact(days: 5.0 / (24 * 60), price: "9.99", environment: "Sandbox"), offer: nil) == 9_990)
        #expect(ReportTimeline.monthly(fact(days: 1.0 / 24, price: "99.99", environment: "Sandbox"), offer: nil) == 8_333)
        var extended = fact(days: 31 + 30, price: "9.99")
        extended.expiresBeforeExtension = Self.start.addingTimeInterval(31 * 86_400)
        #expect(ReportTimeline.monthly(extended, offer: nil) == 9_990, "an extension does not make a month two")
        #expect(PurchaseFact.milliunits(decimal: "1.9995") == 2_000 && PurchaseFact.milliunits(decimal: "0") == 0)
        #expect(PurchaseFact.milliunits(decimal: "-1") == nil && PurchaseFact.milliunits(decimal: "1e3") == nil)
    }

    /// A customer's pieces take their transaction's environment, grace and billing retry
    /// included; credits are the sandbox's only when every credit purchase was made there.
    @Test func piecesTakeTheirTransactionsEnvironment() throws {
        let catalog = try EntitlementCatalog(
            json: Data(
                #"""
                {"publishers":[{"id":"demo","apps":[{"bundleId":"b","appAppleId":1234567890,"environments":["Sandbox","Production"]}],
                "offers":[{"offerId":"premium","productIds":["monthly"],"price":9.99,"currency":"USD","entitlements":["premium"]},
                {"offerId":"credits","productIds":["credits.100"],"price":0.99,"currency":"USD","credits":100}]}]}
                """#.utf8))
        let publisher = try #require(catalog.publisher("demo"))
        let engine = EntitlementEngine(publisher: publisher)
        func pieces(_ environments: [String], credits: Bool = false) -> [ReportPiece] {
            var state = CustomerEntitlements(publisher: "demo", customer: "c")
            for (index, environment) in environments.enumerated() {
                let bought = Self.start.addingTimeInterval(Double(index) * 86_400)
                let fact = PurchaseFact(
                    transactionId: "\(index)", originalTransactionId: credits ? "\(index)" : "0",
                    productId: credits ? "credits.100" : "monthly",
                    bundleId: "b", kind: credits ? .consumable : .autoRenewable, environment: environment, purchaseDate: bought,
                    expiresDate: credits ? nil : bought.addingTimeInterval(86_400), signedDate: bought, price: "9.99", currency: "USD")
                _ = engine.apply(fact, to: &state, now: bought)
            }
            if !credits {
                state.billingRetries.append(
                    .init(
                        originalTransactionId: "0", transactionId: "\(environments.count - 1)",
                        from: Self.start.addingTimeInterval(9 * 86_400)))
            }
            return ReportTimeline.pieces(of: state, publisher: publisher)
        }
        let tester = pieces(["Sandbox", "Sandbox"])
        #expect(Set(tester.map(\.phase)).isSuperset(of: [.paying, .billingRetry]) && tester.allSatisfy { $0.environment == .sandbox })
        #expect(pieces(["Production"]).allSatisfy { $0.environment == .production })
        #expect(pieces(["Sandbox"], credits: true).map(\.environment) == [.sandbox], "a tester's credits")
        #expect(pieces(["Sandbox", "Production"], credits: true).map(\.environment) == [.production], "a customer who also paid")
        #expect(pieces(["Xcode", "Sandbox"], credits: true).map(\.environment) == [.sandbox], "a tester's, in Xcode and TestFlight")
    }

    /// Random pieces added and taken away in random order: the running totals a query gives
    /// equal the pieces still there counted at each midnight, production's and the sandbox's
    /// each of their own.
    @Test(arguments: [1, 2, 3, 4, 5]) func runningTotalsEqualThePiecesCountedAtEachMidnight(seed: UInt64) async throws {
        var random = SeededRandom(seed: seed)
        let fold = ReportFold(calendar: Self.calendar)
        let source = MemorySource()
        var live: [ReportPiece] = []
        let products = ["monthly", "annual"]
        for _ in 0..<400 {
            if !live.isEmpty && random.next(100) < 30 {
                let index = Int(random.next(UInt64(live.count)))
                let piece = live.remove(at: index)
                source.add(fold.increments(of: ReportDelta(removed: [piece], added: [])))
            } else {
                let from = Self.start.addingTimeInterval(Double(random.next(120 * 86_400)))
                let to: Date? = random.next(4) == 0 ? nil : from.addingTimeInterval(Double(random.next(40 * 86_400)))
                let phases: [ReportPiece.Phase] = [.paying, .trial, .grace, .billingRetry, .credits]
                let piece = ReportPiece(
                    phase: phases[Int(random.next(5))], from: from, to: to, productId: products[Int(random.next(2))], offerId: "premium",
                    storefront: random.next(2) == 0 ? "USA" : "FRA", currency: random.next(2) == 0 ? "USD" : "EUR",
                    monthly: Int64(random.next(20_000)), environment: random.next(3) == 0 ? .sandbox : .production)
                live.append(piece)
                source.add(fold.increments(of: ReportDelta(removed: [], added: [piece])))
            }
        }
        for environment in ReportEnvironment.allCases {
            try await expectRunningTotals(
                of: live.filter { $0.environment == environment }, source: source, environment: environment)
        }
    }

    func expectRunningTotals(of live: [ReportPiece], source: MemorySource, environment: ReportEnvironment) async throws {
        let query = ReportQuery(calendar: Self.calendar, source: source, environment: environment)
        let first = Self.calendar.day(of: Self.start)
        let last = Self.calendar.adding(days: 170, to: first)
        let paying = try await query.run(.payingSubscriptions, from: first, to: last, by: .day)
        #expect(paying.environment == environment.rawValue)
        #expect(paying.points.contains { $0.value > 0 }, "\(environment) has pieces")
        let active = try await query.run(.activeSubscriptions, from: first, to: last, by: .day)
        let mrr = try await query.run(.mrr, from: first, to: last, by: .day)
        for point in paying.points {
            let day = try #require(ReportDay(point.key))
            let midnight = Self.calendar.start(of: Self.calendar.adding(days: 1, to: day))
            func going(_ piece: ReportPiece) -> Bool { piece.from < midnight && (piece.to.map { $0 >= midnight } ?? true) }
            #expect(point.value == Double(live.filter { $0.phase == .paying && going($0) }.count), "paying on \(day)")
            let withAccess = live.filter { [.paying, .trial, .grace].contains($0.phase) && going($0) }.count
            #expect(active.points.first { $0.key == point.key }?.value == Double(withAccess), "active on \(day)")
            for currency in ["USD", "EUR"] {
                let expected = live.filter { $0.phase == .paying && $0.currency == currency && going($0) }.reduce(0) {
                    $0 + ($1.monthly ?? 0)
                }
                #expect(mrr.points.first { $0.key == point.key && $0.currency == currency }?.value ?? 0 == Double(expected))
            }
        }
        // By month: each month's last day. By storefront: the range's last day.
        let monthly = try await query.run(.payingSubscriptions, from: first, to: last, by: .month)
        for point in monthly.points {
            let lastDay = paying.points.last { $0.key.hasPrefix(point.key) }
            #expect(point.value == lastDay?.value, "a month's running total is its last day's")
        }
        let byStorefront = try await query.run(.payingSubscriptions, from: first, to: last, by: .storefront)
        #expect(byStorefront.points.reduce(0) { $0 + $1.value } == paying.points.last?.value)
    }

    @Test func flowsAreSummedPerPeriodAndMoneyKeepsItsCurrency() async throws {
        let fold = ReportFold(calendar: Self.calendar)
        let source = MemorySource()
        var expectedRevenue: [String: Double] = [:]
        for index in 0..<60 {
            var event = LifecycleEvent(
                id: "e\(index)", type: index % 3 == 0 ? .initialPurchase : .renewal, publisher: "demo", customer: "c\(index % 7)",
                occurredAt: Self.start.addingTimeInterval(Double(index) * 36_000), recordedAt: Self.start)
            event.productId = "monthly"
            event.offerId = index % 2 == 0 ? "premium" : "basic"
            event.currency = index % 4 == 0 ? "EUR" : "USD"
            event.priceMilliunits = 9_990
            event.resubscribed = index % 9 == 0 && index % 3 != 0 ? true : nil
            // Production's, named or (an import, an older entry) not.
            event.environment = index % 2 == 0 ? "Production" : nil
            expectedRevenue[event.currency ?? "", default: 0] += 9_990
            source.add(fold.increments(of: event))
        }
        var family = LifecycleEvent(
            id: "f", type: .initialPurchase, publisher: "demo", customer: "x", occurredAt: Self.start, recordedAt: Self.start)
        (family.priceMilliunits, family.currency, family.familyShared) = (5_000, "USD", true)
        source.add(fold.increments(of: family))
        // Testers' purchases: TestFlight (Sandbox), Xcode's StoreKit testing.
        for (index, environment) in ["Sandbox", "Xcode", "LocalTesting", "Sandbox"].enumerated() {
            var event = LifecycleEvent(
                id: "s\(index)", type: index == 0 ? .initialPurchase : .renewal, publisher: "demo", customer: "tester",
                occurredAt: Self.start.addingTimeInterval(Double(index) * 300), recordedAt: Self.start)
            (event.productId, event.offerId, event.currency, event.priceMilliunits) = ("monthly", "premium", "USD", 9_990)
            event.environment = environment
            source.add(fold.increments(of: event))
        }
        let query = ReportQuery(calendar: Self.calendar, source: source)
        let first = Self.calendar.day(of: Self.start)
        let last = Self.calendar.adding(days: 40, to: first)
        let revenue = try await query.run(.grossRevenue, from: first, to: last, by: .week)
        for currency in ["USD", "EUR"] {
            #expect(revenue.points.filter { $0.currency == currency }.reduce(0) { $0 + $1.value } == expectedRevenue[currency])
        }
        let renewals = try await query.run(.renewals, from: first, to: last, by: .month)
        let reactivations = try await query.run(.reactivations, from: first, to: last, by: .offer)
        let initial = try await query.run(.newPaidSubscriptions, from: first, to: last, by: .day)
        #expect(renewals.points.reduce(0) { $0 + $1.value } + reactivations.points.reduce(0) { $0 + $1.value } == 40)
        #expect(initial.points.reduce(0) { $0 + $1.value } == 20, "a family member's access is no sale")
        #expect(Set(reactivations.points.map(\.key)).isSubset(of: ["premium", "basic"]))

        let sandbox = ReportQuery(calendar: Self.calendar, source: source, environment: .sandbox)
        let testers = try await sandbox.run(.grossRevenue, from: first, to: last, by: .storefront)
        #expect(testers.points == [ReportPoint(key: "unknown", currency: "USD", value: 4 * 9_990)], "the testers' purchases, apart")
        #expect(try await sandbox.run(.renewals, from: first, to: last, by: .month).points.map(\.value) == [3, 0])
    }

    @Test func badRequestsAreRefusedWithAMessage() {
        let today = ReportDay(year: 2026, month: 11, day: 25)
        func refusal(_ metrics: [String], from: String? = nil, to: String? = nil, by: String? = nil, environment: String? = nil) -> String?
        {
            do {
                _ = try ReportRequest.parse(
                    metrics: metrics, from: from, to: to, by: by, environment: environment, today: today, calendar: Self.calendar)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(refusal(["mrr"]) == nil)
        #expect(refusal(["nope"])?.contains("unknown metric nope") == true)
        #expect(refusal([])?.contains("name a metric") == true)
        #expect(refusal(["mrr"], from: "2026-11-30", to: "2026-11-01")?.contains("after") == true)
        #expect(refusal(["mrr"], from: "2010-01-01", to: "2026-11-01")?.contains("ten years") == true)
        #expect(refusal(["mrr"], from: "2026-02-30")?.contains("yyyy-mm-dd") == true)
        #expect(refusal(["mrr"], to: "yesterday")?.contains("yyyy-mm-dd") == true)
        #expect(refusal(["mrr"], by: "hour")?.contains("by must be one of") == true)
        #expect(refusal(["mrr"], environment: "Sandbox")?.contains("environment must be production or sandbox") == true)
        #expect(
            (try? ReportRequest.parse(
                metrics: ["mrr"], from: nil, to: nil, by: nil, environment: "sandbox", today: today, calendar: Self.calendar))?
                .environment == .sandbox)
        let request = try? ReportRequest.parse(metrics: ["mrr"], from: nil, to: nil, by: nil, today: today, calendar: Self.calendar)
        #expect(request?.from == ReportDay(year: 2026, month: 10, day: 27) && request?.to == today && request?.grouping == .day)
        #expect(request?.environment == .production)
    }
}

/// SplitMix64: the same sequence for a seed, on every machine.
struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(_ bound: UInt64) -> UInt64 { next() % bound }
}
