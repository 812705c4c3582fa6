import EntitleCore
import Entitlements
import Foundation
import Reporting
import Testing

/// The event log's hand-written JSON reads back as `JSONEncoder` would have written it: every
/// field, every kind of text, dates to the millisecond.
@Suite struct EventLogJSONTests {
    static func strings() -> [String] {
        ["plain", "", "quote \" and \\ backslash", "line\nbreak\ttab\r", "\u{1}\u{1F}control", "émoji 😀 ünï", "{\"json\":1}"]
    }

    @Test func everyEventReadsBackAsWritten() throws {
        var random = SystemRandomNumberGenerator()
        let texts = Self.strings()
        func text() -> String? { Bool.random(using: &random) ? texts.randomElement(using: &random) : nil }
        func date() -> Date? {
            Bool.random(using: &random)
                ? Date(timeIntervalSince1970: Double(Int64.random(in: 0...4_000_000_000_000, using: &random)) / 1000) : nil
        }
        func number() -> Int? { Bool.random(using: &random) ? Int.random(in: -1_000_000...1_000_000, using: &random) : nil }
        func flag() -> Bool? { Bool.random(using: &random) ? Bool.random(using: &random) : nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        for _ in 0..<500 {
            var event = LifecycleEvent(
                id: texts.randomElement() ?? "", type: LifecycleEventType.allCases.randomElement() ?? .renewal, publisher: "demo",
                customer: texts.randomElement() ?? "", occurredAt: date() ?? Date(timeIntervalSince1970: 0),
                recordedAt: date() ?? Date(timeIntervalSince1970: 1))
            event.customerVersion = number()
            (event.transactionId, event.originalTransactionId, event.productId, event.offerId) = (text(), text(), text(), text())
            (event.storefront, event.environment, event.currency, event.fromProductId, event.toProductId) = (
                text(), text(), text(), text(), text()
            )
            (event.effective, event.change, event.reason, event.revocationType, event.from, event.to) = (
                text(), text(), text(), text(), text(), text()
            )
            (event.road, event.vouchedBy, event.offerIdentifier, event.reference) = (text(), text(), text(), text())
            (event.priceMilliunits, event.refundMilliunits) = (number().map(Int64.init), number().map(Int64.init))
            (event.revocationPercentage, event.amount, event.balance, event.previousBalance, event.shortfall) = (
                number(), number(), number(), number(), number()
            )
            (event.familyShared, event.shared, event.trial, event.resubscribed, event.appAccountTokenMatched, event.consented) =
                (flag(), flag(), flag(), flag(), flag(), flag())
            (event.expiresDate, event.gracePeriodExpiresDate, event.previousExpiresDate) = (date(), date(), date())
            event.priceSource = [PurchaseFact.PriceSource.apple, .reported, .catalog, nil].randomElement() ?? nil
            event.offerKind = [PurchaseFact.OfferKind.introductory, .winBack, nil].randomElement() ?? nil
            let written = try EventLog.encode(event)
            let back = try decoder.decode(LifecycleEvent.self, from: Data(written.utf8))
            #expect(back == event, "\(written)")
            // The folder's fast reader reads it the same.
            guard case .event(let read) = EventLog.decode(field: "e", value: written) else {
                Issue.record("not read: \(written)")
                continue
            }
            #expect(read == event, "\(written)")
            // The same keys as JSONEncoder writes, and the same event read from either.
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            encoder.dateEncodingStrategy = .millisecondsSince1970
            let reference = try encoder.encode(event)
            let keys = { (data: Data) in ((try? JSONSerialization.jsonObject(with: data)) as? [String: Any]).map { Array($0.keys).sorted() }
            }
            #expect(keys(Data(written.utf8)) == keys(reference))
            #expect(try decoder.decode(LifecycleEvent.self, from: reference) == back)
        }
    }

    @Test func whatTheFastReaderDoesNotKnowIsReadByJSONDecoderOrSkipped() throws {
        var event = LifecycleEvent(
            id: "e", type: .renewal, publisher: "demo", customer: "c", occurredAt: Date(timeIntervalSince1970: 1_790_000_000.1234),
            recordedAt: Date(timeIntervalSince1970: 1_790_000_001))
        event.priceMilliunits = 9_990
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .millisecondsSince1970
        // A fraction of a millisecond (an earlier writer): the standard decoder reads it.
        let written = String(decoding: try encoder.encode(event), as: UTF8.self)
        guard case .event(let read) = EventLog.decode(field: "e", value: written) else {
            Issue.record("not read: \(written)")
            return
        }
        #expect(read.id == "e" && read.priceMilliunits == 9_990)
        for broken in ["{\"id\":1}", "{", "", "[]", "{\"id\":\"e\",\"type\":\"nope\"}"] {
            guard case .unreadable = EventLog.decode(field: "e", value: broken) else {
                Issue.record("\(broken) was read")
                continue
            }
        }
        guard case .unreadable = EventLog.decode(field: "x", value: "{}") else {
            Issue.record("an unknown field was read")
            return
        }
    }

    @Test func piecesReadBackAsWritten() throws {
        let pieces = [
            ReportPiece(
                phase: .paying, from: Date(timeIntervalSince1970: 1_790_000_000.123), to: Date(timeIntervalSince1970: 1_792_000_000),
                productId: "p\"1", offerId: "o", storefront: "FRA", currency: "EUR", monthly: 9_990),
            ReportPiece(phase: .credits, from: Date(timeIntervalSince1970: 1_790_000_000), to: nil),
        ]
        let written = try EventLog.encode(ReportDelta(removed: [pieces[1]], added: pieces), customer: "ann@example.com")
        guard case .delta(let delta, let customer) = EventLog.decode(field: "d", value: written) else {
            Issue.record("not a delta: \(written)")
            return
        }
        #expect(customer == "ann@example.com" && delta.added == pieces && delta.removed == [pieces[1]])
    }
}
