import Entitlements
import Foundation
import Reporting
import Testing

/// A refund Apple reversed is no refund in the end: its count and amount are counted off on
/// the day of the reversal, and a subscription the refund had ended, going on, is churned
/// once, when it really ends (Apple's records then have the purchase and no refund). A refund
/// counted whole from a receipt ends at the share Apple's signed view tells.
@Suite struct ReversedRefundTests {
    /// A customer whose changes are folded as the worker folds them: the events and the
    /// report delta of each change.
    final class FoldedCustomer {
        let publisher: Publisher
        let engine: EntitlementEngine
        let fold = ReportFold(calendar: .utc)
        let source = ReportFoldTests.MemorySource()
        var state = CustomerEntitlements(publisher: "demo", customer: "ann")
        var events: [LifecycleEvent] = []
        var types: [LifecycleEventType] { events.map(\.type) }

        init() throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            let catalog = try EntitlementCatalog(json: try Data(contentsOf: root.appending(path: "Config/catalog.development.json")))
            publisher = try #require(catalog.publisher("demo"))
            engine = EntitlementEngine(publisher: publisher)
        }

        func apply(_ view: PurchaseFact, at now: Date, autoRenew: Bool = true) {
            let before = state
            var view = view
            view.signedDate = now
            _ = engine.apply(
                view, renewal: RenewalFact(originalTransactionId: view.originalTransactionId, autoRenew: autoRenew, signedDate: now),
                to: &state, now: now)
            for event in LifecycleEvents(publisher: publisher, now: now).derive(before: before, after: state) {
                events.append(event)
                source.add(fold.increments(of: event))
            }
            if let delta = ReportDelta.between(
                ReportTimeline.pieces(of: before, publisher: publisher), ReportTimeline.pieces(of: state, publisher: publisher))
            {
                source.add(fold.increments(of: delta))
            }
        }

        func total(_ metric: ReportMetric, by: ReportGrouping = .month) async throws -> [String: Double] {
            let first = ReportCalendar.utc.day(of: ReportFoldTests.start)
            let points = try await ReportQuery(calendar: .utc, source: source).run(
                metric, from: first, to: ReportCalendar.utc.adding(days: 400, to: first), by: by
            ).points
            return points.reduce(into: [:]) { $0[$1.key, default: 0] += $1.value }
        }

        func sum(_ metric: ReportMetric) async throws -> Double { try await total(metric).values.reduce(0, +) }
    }

    static let day: TimeInterval = 86_400

    static func monthly(
        _ id: String, price: String = "9.99", product: String = "com.entitle.demo.premium.monthly", days: Double = 30
    )
        -> PurchaseFact
    {
        let start = ReportFoldTests.start
        return PurchaseFact(
            transactionId: id, originalTransactionId: id, productId: product, bundleId: "com.entitle.demo", kind: .autoRenewable,
            environment: "Production", purchaseDate: start, expiresDate: start.addingTimeInterval(days * day), signedDate: start,
            price: price, currency: "USD", storefront: "USA")
    }

    @Test func aReversedRefundLeavesNoRefundAndOneChurn() async throws {
        let ann = try FoldedCustomer()
        let start = ReportFoldTests.start
        var view = Self.monthly("70")
        ann.apply(view, at: start)
        (view.revocationDate, view.revocationType, view.revocationPercentage) = (
            start.addingTimeInterval(10 * Self.day), "REFUND_FULL", nil
        )
        ann.apply(view, at: start.addingTimeInterval(10 * Self.day))
        (view.revocationDate, view.revocationType) = (nil, nil)
        ann.apply(view, at: start.addingTimeInterval(11 * Self.day))
        #expect(ann.state.subscriptions["70"]?.status == .active)
        ann.apply(view, at: start.addingTimeInterval(40 * Self.day), autoRenew: false)
        #expect(ann.state.subscriptions["70"]?.status == .expired)
        #expect(ann.types.filter { $0 == .expiration }.count == 2 && ann.types.contains(.refundReversed))

        #expect(try await ann.sum(.grossRevenue) == 9_990)
        #expect(try await ann.sum(.refunds) == 0)
        #expect(try await ann.sum(.refundAmount) == 0)
        #expect(try await ann.sum(.netRevenue) == 9_990)
        #expect(try await ann.sum(.churned) == 1)
        // On the days themselves: the refund on its day, taken back on the reversal's.
        let first = ReportCalendar.utc.day(of: start)
        let byDay = try await ann.total(.refunds, by: .day)
        #expect(byDay["\(ReportCalendar.utc.adding(days: 10, to: first))"] == 1)
        #expect(byDay["\(ReportCalendar.utc.adding(days: 11, to: first))"] == -1)
    }

    /// A receipt says a transaction was refunded, not how much: a prorated refund learnt from
    /// one (a V1 notification, an app's receipt) is counted as the whole price until Apple's
    /// signed view tells its share. Then the refund's day counts what it took, as Apple's
    /// records say, and a reversal after it gives back that share, not the whole.
    @Test func aRefundFirstToldByAReceiptEndsAtTheShareAppleTells() async throws {
        let ann = try FoldedCustomer()
        let start = ReportFoldTests.start
        let refunded = start.addingTimeInterval(100 * Self.day)
        var view = Self.monthly("80", price: "99.99", product: "com.entitle.demo.premium.annual", days: 365)
        ann.apply(view, at: start)
        view.revocationDate = refunded
        ann.apply(view, at: refunded)
        #expect(ann.events.last { $0.type == .refund }?.refundMilliunits == 99_990, "a receipt's refund is the whole, for now")
        (view.revocationType, view.revocationPercentage) = ("REFUND_PRORATED", 72_603)
        ann.apply(view, at: refunded.addingTimeInterval(Self.day))
        let adjusted = try #require(ann.events.last)
        #expect(adjusted.type == .refundAdjusted && adjusted.occurredAt == refunded)
        #expect(adjusted.refundMilliunits == 72_596 && adjusted.previousRefundMilliunits == 99_990)  // 99990 × 0.72603
        #expect(adjusted.revocationType == "REFUND_PRORATED" && adjusted.revocationPercentage == 72_603)
        #expect(ann.types.filter { $0 == .refund }.count == 1)

        #expect(try await ann.sum(.refunds) == 1)
        #expect(try await ann.sum(.refundAmount) == 72_596)
        #expect(try await ann.sum(.netRevenue) == 99_990 - 72_596)
        let byDay = try await ann.total(.refundAmount, by: .day)
        #expect(byDay["\(ReportCalendar.utc.day(of: refunded))"] == 72_596, "on the refund's own day: \(byDay)")

        // Reversed: what the refund took comes back, nothing more.
        (view.revocationDate, view.revocationType, view.revocationPercentage) = (nil, nil, nil)
        ann.apply(view, at: refunded.addingTimeInterval(2 * Self.day))
        #expect(ann.events.last { $0.type == .refundReversed }?.refundMilliunits == 72_596)
        #expect(try await ann.sum(.refundAmount) == 0)
        #expect(try await ann.sum(.refunds) == 0)
    }
}
