import Entitlements
import Foundation
import Reporting
import Testing

/// A refund Apple reversed is no refund in the end: its count and amount are counted off on
/// the day of the reversal, and a subscription the refund had ended, going on, is churned
/// once, when it really ends (Apple's records then have the purchase and no refund).
@Suite struct ReversedRefundTests {
    @Test func aReversedRefundLeavesNoRefundAndOneChurn() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let catalog = try EntitlementCatalog(json: try Data(contentsOf: root.appending(path: "Config/catalog.development.json")))
        let publisher = try #require(catalog.publisher("demo"))
        let engine = EntitlementEngine(publisher: publisher)
        let fold = ReportFold(calendar: .utc)
        let source = ReportFoldTests.MemorySource()
        let day: TimeInterval = 86_400
        let start = ReportFoldTests.start
        var state = CustomerEntitlements(publisher: "demo", customer: "ann")
        var view = PurchaseFact(
            transactionId: "70", originalTransactionId: "70", productId: "com.entitle.demo.premium.monthly", bundleId: "com.entitle.demo",
            kind: .autoRenewable, environment: "Production", purchaseDate: start, expiresDate: start.addingTimeInterval(30 * day),
            signedDate: start, price: "9.99", currency: "USD", storefront: "USA")
        var types: [LifecycleEventType] = []
        func apply(at now: Date, autoRenew: Bool = true) {
            let before = state
            view.signedDate = now
            _ = engine.apply(
                view, renewal: RenewalFact(originalTransactionId: "70", autoRenew: autoRenew, signedDate: now), to: &state, now: now)
            for event in LifecycleEvents(publisher: publisher, now: now).derive(before: before, after: state) {
                types.append(event.type)
                source.add(fold.increments(of: event))
            }
            if let delta = ReportDelta.between(
                ReportTimeline.pieces(of: before, publisher: publisher), ReportTimeline.pieces(of: state, publisher: publisher))
            {
                source.add(fold.increments(of: delta))
            }
        }
        apply(at: start)
        (view.revocationDate, view.revocationType, view.revocationPercentage) = (start.addingTimeInterval(10 * day), "REFUND_FULL", nil)
        apply(at: start.addingTimeInterval(10 * day))
        (view.revocationDate, view.revocationType) = (nil, nil)
        apply(at: start.addingTimeInterval(11 * day))
        #expect(state.subscriptions["70"]?.status == .active)
        apply(at: start.addingTimeInterval(40 * day), autoRenew: false)
        #expect(state.subscriptions["70"]?.status == .expired)
        #expect(types.filter { $0 == .expiration }.count == 2 && types.contains(.refundReversed))

        let query = ReportQuery(calendar: .utc, source: source)
        let first = ReportCalendar.utc.day(of: start)
        let last = ReportCalendar.utc.adding(days: 60, to: first)
        func total(_ metric: ReportMetric) async throws -> Double {
            try await query.run(metric, from: first, to: last, by: .month).points.reduce(0) { $0 + $1.value }
        }
        #expect(try await total(.grossRevenue) == 9_990)
        #expect(try await total(.refunds) == 0)
        #expect(try await total(.refundAmount) == 0)
        #expect(try await total(.netRevenue) == 9_990)
        #expect(try await total(.churned) == 1)
        // On the days themselves: the refund on its day, taken back on the reversal's.
        let byDay = try await query.run(.refunds, from: first, to: last, by: .day).points
        #expect(byDay.first { $0.key == "\(ReportCalendar.utc.adding(days: 10, to: first))" }?.value == 1)
        #expect(byDay.first { $0.key == "\(ReportCalendar.utc.adding(days: 11, to: first))" }?.value == -1)
    }
}
