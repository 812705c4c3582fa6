import Entitlements
import Foundation
import Reporting
import Testing

@testable import EntitleCore

/// The event log's hand-written JSON reads back as `JSONEncoder` would have written it: every
/// field, every kind of text, dates to the millisecond.
@Suite struct EventLogJSONTests {
    static func strings() -> [String] {
        ["plain", "", "quote \" and \\ backslash", "line\nbreak\ttab\r", "\u{1}\u{1F}control", "émoji 😀 ünï", "{\"json\":1}"]
    }

    /// An event with a random value, or none, in every field: texts of every kind, dates to
    /// the millisecond, ids as `LifecycleEvents` makes them or any other text.
    static func randomEvent(publisher: String = "demo") -> LifecycleEvent {
        var random = SystemRandomNumberGenerator()
        let texts = Self.strings()
        func text() -> String? { Bool.random(using: &random) ? texts.randomElement(using: &random) : nil }
        func date() -> Date? {
            Bool.random(using: &random)
                ? Date(timeIntervalSince1970: Double(Int64.random(in: 0...4_000_000_000_000, using: &random)) / 1000) : nil
        }
        func number() -> Int? { Bool.random(using: &random) ? Int.random(in: -1_000_000...1_000_000, using: &random) : nil }
        func flag() -> Bool? { Bool.random(using: &random) ? Bool.random(using: &random) : nil }
        let type = LifecycleEventType.allCases.randomElement() ?? .renewal
        let customer = texts.randomElement() ?? ""
        let occurredAt = date() ?? Date(timeIntervalSince1970: 0)
        // Recorded a moment after it occurred, as most are, or at any date.
        let occurredMs = Int64((occurredAt.timeIntervalSince1970 * 1000).rounded())
        let soon = Date(timeIntervalSince1970: Double(occurredMs + Int64.random(in: -5_000...5_000, using: &random)) / 1000)
        let recordedAt = Bool.random(using: &random) ? soon : date() ?? Date(timeIntervalSince1970: 1)
        var event = LifecycleEvent(
            id: texts.randomElement() ?? "", type: type, publisher: publisher, customer: customer, occurredAt: occurredAt,
            recordedAt: recordedAt)
        event.customerVersion = number()
        (event.transactionId, event.originalTransactionId, event.productId, event.offerId) = (text(), text(), text(), text())
        if Bool.random(using: &random) { event.originalTransactionId = event.transactionId }
        switch Int.random(in: 0..<3, using: &random) {
        case 0: event.id = "\(publisher):\(customer):\(type.rawValue):\(event.transactionId ?? "")"
        case 1: event.id = "\(publisher):\(customer):\(type.rawValue):\(text() ?? "")"
        default: break
        }
        (event.storefront, event.environment, event.currency, event.fromProductId, event.toProductId) = (
            text(), text(), text(), text(), text()
        )
        (event.effective, event.change, event.reason, event.revocationType, event.from, event.to) = (
            text(), text(), text(), text(), text(), text()
        )
        (event.road, event.vouchedBy, event.offerIdentifier, event.reference) = (text(), text(), text(), text())
        (event.priceMilliunits, event.refundMilliunits, event.previousRefundMilliunits) = (
            number().map(Int64.init), number().map(Int64.init), number().map(Int64.init)
        )
        (event.revocationPercentage, event.amount, event.balance, event.previousBalance, event.shortfall) = (
            number(), number(), number(), number(), number()
        )
        (event.familyShared, event.shared, event.trial, event.resubscribed, event.appAccountTokenMatched, event.consented) =
            (flag(), flag(), flag(), flag(), flag(), flag())
        (event.provisional, event.imported, event.confirmed) = (flag(), flag(), flag())
        (event.expiresDate, event.gracePeriodExpiresDate, event.previousExpiresDate, event.provisionalUntil) = (
            date(), date(), date(), date()
        )
        event.priceSource = [PurchaseFact.PriceSource.apple, .reported, .catalog, nil].randomElement() ?? nil
        event.offerKind = [PurchaseFact.OfferKind.introductory, .promotional, .offerCode, .winBack, nil].randomElement() ?? nil
        return event
    }

    /// The event a first subscription purchase with a free trial makes, as the simulator sells it.
    static func trialStarted() -> LifecycleEvent {
        var trial = LifecycleEvent(
            id: "demo:m1@example.com:trial_started:2179571119160902", type: .trialStarted, publisher: "demo", customer: "m1@example.com",
            occurredAt: Date(timeIntervalSince1970: 1_795_711_191.666), recordedAt: Date(timeIntervalSince1970: 1_795_711_191.692))
        trial.customerVersion = 1
        (trial.transactionId, trial.originalTransactionId) = ("2179571119160902", "2179571119160902")
        (trial.productId, trial.offerId, trial.storefront, trial.environment) = (
            "com.entitle.demo.premium.monthly", "premium", "USA", "Sandbox"
        )
        (trial.priceMilliunits, trial.currency, trial.priceSource) = (0, "USD", .apple)
        trial.expiresDate = Date(timeIntervalSince1970: 1_795_711_371.666)
        return trial
    }

    @Test func everyEventReadsBackAsWritten() throws {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        for _ in 0..<500 {
            let event = Self.randomEvent()
            let written = try EventLog.encode(event)
            let back = try decoder.decode(LifecycleEvent.self, from: Data(written.utf8))
            #expect(back == event, "\(written)")
            // The folder's fast reader reads it the same.
            guard case .event(let read) = EventLog.decode(field: "e", value: written, publisher: "demo") else {
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

    /// The compact entry (field `E`) reads back as the same event, every field, and is less
    /// than half the long form for the events a purchase makes.
    @Test func everyEventReadsBackFromItsCompactEntry() throws {
        for _ in 0..<2_000 {
            let event = Self.randomEvent()
            let entry = try EventLog.entry(event, format: .compact)
            #expect(entry.field == "E")
            guard case .event(let read) = EventLog.decode(field: entry.field, value: entry.value, publisher: "demo") else {
                Issue.record("not read: \(entry.value)")
                continue
            }
            #expect(read == event, "\(entry.value)")
        }
        // As versions before it wrote, for a rolling upgrade.
        let event = Self.randomEvent()
        let older = try EventLog.entry(event, format: .long)
        let long = try EventLog.encode(event)
        #expect(older.field == "e" && older.value == long)

        let trial = Self.trialStarted()
        let compact = try EventLog.entry(trial, format: .compact).value
        // Written to Redis and kept for the retention: what an entry says never changes.
        #expect(
            compact
                == #"{"cu":"USD","c":"m1@example.com","v":1,"en":"Sandbox","x":1795711371666,"o":1795711191666,"of":"premium","pm":0,"ps":"apple","p":"com.entitle.demo.premium.monthly","s":"USA","t":"2179571119160902","y":"trial_started","r":26}"#
        )
        let trialLong = try EventLog.encode(trial)
        #expect(compact.utf8.count * 2 < trialLong.utf8.count, "\(compact.utf8.count) bytes against \(trialLong.utf8.count)")
        guard case .event(let read) = EventLog.decode(field: "E", value: compact, publisher: "demo") else {
            Issue.record("not read: \(compact)")
            return
        }
        #expect(read == trial)
        // Another publisher's stream reads another id: the publisher is the stream's.
        guard case .event(let elsewhere) = EventLog.decode(field: "E", value: compact, publisher: "other") else { return }
        #expect(elsewhere.publisher == "other" && elsewhere.id.hasPrefix("other:"))
        // A name a later version added is left out; a date far from the occurrence is whole.
        guard
            case .event(let later) = EventLog.decode(
                field: "E", value: #"{"zz":1,"c":"x","y":"renewal","o":-9000000000000000000,"R":9000000000000000000,"t":"1"}"#,
                publisher: "demo")
        else {
            Issue.record("a later version's entry was not read")
            return
        }
        #expect(later.id == "demo:x:renewal:1" && later.originalTransactionId == "1")
        #expect(later.recordedAt == Date(timeIntervalSince1970: 9e15) && later.occurredAt == Date(timeIntervalSince1970: -9e15))
        var far = trial
        (far.occurredAt, far.recordedAt) = (Date(timeIntervalSince1970: -9e15), Date(timeIntervalSince1970: 9e15))
        let farEntry = try EventLog.entry(far, format: .compact).value
        #expect(farEntry.contains(#""R":9000000000000000000"#))
        guard case .event(let farRead) = EventLog.decode(field: "E", value: farEntry, publisher: "demo") else {
            Issue.record("not read: \(farEntry)")
            return
        }
        #expect(farRead == far)
        // The clamped edges: a date beyond Int64's milliseconds either way.
        (far.occurredAt, far.recordedAt) = (Date(timeIntervalSince1970: -1e300), Date(timeIntervalSince1970: 1e300))
        let edge = try EventLog.entry(far, format: .compact).value
        #expect(edge.contains(#""o":-9223372036854775808"#) && edge.contains(#""R":9223372036854775807"#), "\(edge)")
        guard case .event(let edgeRead) = EventLog.decode(field: "E", value: edge, publisher: "demo") else {
            Issue.record("not read: \(edge)")
            return
        }
        #expect(edgeRead.occurredAt == Date(timeIntervalSince1970: Double(Int64.min) / 1000))
        #expect(edgeRead.recordedAt == Date(timeIntervalSince1970: Double(Int64.max) / 1000))
        for broken in ["{}", "{\"c\":\"x\"}", "{\"c\":\"x\",\"y\":\"nope\",\"o\":1,\"r\":0,\"t\":\"1\"}", "[", ""] {
            guard case .unreadable = EventLog.decode(field: "E", value: broken, publisher: "demo") else {
                Issue.record("\(broken) was read")
                continue
            }
        }
    }

    /// Every field an event has is in the log's entries: a field added to `LifecycleEvent`
    /// without a short name would be written under its long one, which a compact entry's
    /// reader leaves out.
    @Test func everyFieldOfAnEventHasItsPlaceInACompactEntry() {
        var event = LifecycleEvent(
            id: "demo:c:renewal:1", type: .renewal, publisher: "demo", customer: "c", occurredAt: Date(timeIntervalSince1970: 1),
            recordedAt: Date(timeIntervalSince1970: 2))
        event.transactionId = "1"
        let labels = Set(Mirror(reflecting: event).children.compactMap(\.label))
        let derived: Set<String> = ["id", "publisher", "recordedAt"]
        #expect(labels.subtracting(derived) == Set(EventLog.compactNames.keys), "\(labels.symmetricDifference(EventLog.compactNames.keys))")
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
        guard case .event(let read) = EventLog.decode(field: "e", value: written, publisher: "demo") else {
            Issue.record("not read: \(written)")
            return
        }
        #expect(read.id == "e" && read.priceMilliunits == 9_990)
        for broken in ["{\"id\":1}", "{", "", "[]", "{\"id\":\"e\",\"type\":\"nope\"}"] {
            guard case .unreadable = EventLog.decode(field: "e", value: broken, publisher: "demo") else {
                Issue.record("\(broken) was read")
                continue
            }
        }
        guard case .unreadable = EventLog.decode(field: "x", value: "{}", publisher: "demo") else {
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
            ReportPiece(
                phase: .trial, from: Date(timeIntervalSince1970: 1_790_000_000), to: Date(timeIntervalSince1970: 1_790_000_180),
                productId: "p", environment: .sandbox),
        ]
        let written = try EventLog.encode(ReportDelta(removed: [pieces[1]], added: pieces), customer: "ann@example.com")
        #expect(written.contains(#""e":"sandbox""#) && written.components(separatedBy: #""e":"#).count == 2, "production leaves it out")
        #expect(EventLogReader.delta(written)?.0.added == pieces, "the fast reader knows the environment")
        // Foundation's decoder (the fallback) reads the same pieces.
        let slow = try JSONDecoder().decode(ReportDelta.self, from: Data(written.utf8))
        #expect(slow.added == pieces)
        guard case .delta(let delta, let customer) = EventLog.decode(field: "d", value: written, publisher: "demo") else {
            Issue.record("not a delta: \(written)")
            return
        }
        #expect(customer == "ann@example.com" && delta.added == pieces && delta.removed == [pieces[1]])
    }
    /// The deflated entries (fields `Z` and `D`) read back as the same event and the same
    /// pieces, every field, and take about half the compact entry's bytes for the events a
    /// purchase makes; what does not inflate (damaged, not base64, another dictionary) is
    /// unreadable, never another event.
    @Test func everyEntryReadsBackFromItsDeflatedForm() throws {
        for _ in 0..<2_000 {
            let event = Self.randomEvent()
            let entry = try EventLog.entry(event, format: .deflated)
            #expect(entry.field == "Z")
            guard case .event(let read) = EventLog.decode(field: entry.field, value: entry.value, publisher: "demo") else {
                Issue.record("not read: \(entry.value)")
                continue
            }
            #expect(read == event, "\(entry.value)")
        }
        let trial = Self.trialStarted()
        let compact = try EventLog.entry(trial, format: .compact).value
        let deflated = try EventLog.entry(trial, format: .deflated).value
        #expect(deflated.utf8.count * 2 < compact.utf8.count + 20, "\(deflated.utf8.count) bytes against \(compact.utf8.count)")

        let pieces = [
            ReportPiece(
                phase: .trial, from: Date(timeIntervalSince1970: 1_795_711_191.666), to: Date(timeIntervalSince1970: 1_795_711_371.666),
                productId: "com.entitle.demo.premium.monthly", offerId: "premium", storefront: "USA", currency: "USD",
                environment: .sandbox),
            ReportPiece(phase: .credits, from: Date(timeIntervalSince1970: 1_790_000_000), to: nil),
        ]
        let delta = ReportDelta(removed: [pieces[1]], added: pieces)
        let pieceEntry = try EventLog.entry(delta, customer: "m1@example.com", format: .deflated)
        #expect(pieceEntry.field == "D")
        guard case .delta(let readDelta, let customer) = EventLog.decode(field: "D", value: pieceEntry.value, publisher: "demo") else {
            Issue.record("not a delta: \(pieceEntry.value)")
            return
        }
        #expect(customer == "m1@example.com" && readDelta.added == pieces && readDelta.removed == [pieces[1]])
        let older = try EventLog.entry(delta, customer: "m1@example.com", format: .compact)
        let plain = try EventLog.encode(delta, customer: "m1@example.com")
        #expect(older.field == "d" && older.value == plain)

        // Damaged: a bit flipped anywhere, cut short, not base64, a plain entry under `Z`.
        var bytes = try #require(Data(base64Encoded: deflated))
        var unreadable = 0
        for index in bytes.indices {
            for bit in 0..<8 {
                bytes[index] ^= 1 << bit
                switch EventLog.decode(field: "Z", value: bytes.base64EncodedString(), publisher: "demo") {
                case .unreadable: unreadable += 1
                // Only the unused bits after the last block may change and read the same.
                case .event(let read): #expect(read == trial, "byte \(index) bit \(bit) read as another event")
                case .delta: Issue.record("byte \(index) bit \(bit) read as a delta")
                }
                bytes[index] ^= 1 << bit
            }
        }
        #expect(unreadable >= bytes.count * 8 - 8, "the checksums catch a flipped bit")
        for broken in [String(deflated.dropLast(8)), "not base64!", "", compact, Data("{}".utf8).base64EncodedString()] {
            guard case .unreadable = EventLog.decode(field: "Z", value: broken, publisher: "demo") else {
                Issue.record("\(broken) was read")
                continue
            }
        }
    }

    /// The deflated form is fixed: an entry written today reads the same in every later
    /// version, for the publisher's whole retention. A change to the dictionary fails here; it
    /// needs new field names instead.
    @Test func theDeflatedFormIsPinned() {
        let digest = SHA256Hex.of(DeflatedEntry.dictionaryText)
        #expect(
            digest == "1eddf84a93ae1d5ab53fd5e9ea3273e8100f1118a3b6481274cfe8693cee953b",
            "the deflated entries' dictionary changed: \(digest)")
        let pinned = "WKT4mCAuw3BorqFDakViLtB8TMeiJQJLU3NDQ2NzQzMzM6ijwSKGllAR4t0PLPoyS4A2pqTm5qMXVJh+QrLHwNLACLfnjMxqAUunPxY="
        guard case .event(let read) = EventLog.decode(field: "Z", value: pinned, publisher: "demo") else {
            Issue.record("the pinned entry was not read")
            return
        }
        #expect(read.type == .trialStarted && read.customer == "m1@example.com" && read.transactionId == "2179571119160902")
    }
}
