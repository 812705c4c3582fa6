import Entitlements
import Foundation
import Reporting

/// The event log's JSON, written by hand: the log is appended on the purchase path, where
/// `JSONEncoder` cost a receipt job several percent. Keys sorted, dates as milliseconds since
/// 1970, absent fields left out: what `EventLog.decoder` (a `JSONDecoder`) reads back, as the
/// tests check against `JSONEncoder`'s output.
struct EventLogJSON {
    private(set) var text = "{"
    private var first = true
    /// Short names to write instead of the long ones (`CompactEvent.shortNames`), if any.
    private let names: [String: String]?

    init(names: [String: String]? = nil) {
        self.names = names
        text.reserveCapacity(names == nil ? 512 : 256)
    }

    mutating func key(_ name: String) {
        if !first { text.append(",") }
        first = false
        text.append("\"")
        text.append(names?[name] ?? name)
        text.append("\":")
    }

    mutating func add(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name)
        Self.quote(value, into: &text)
    }

    mutating func add(_ name: String, _ value: Int64?) {
        guard let value else { return }
        key(name)
        text.append(String(value))
    }

    mutating func add(_ name: String, _ value: Int?) { add(name, value.map(Int64.init)) }

    mutating func add(_ name: String, _ value: Bool?) {
        guard let value else { return }
        key(name)
        text.append(value ? "true" : "false")
    }

    mutating func add(_ name: String, _ value: Date?) {
        guard let value else { return }
        add(name, Self.milliseconds(value))
    }

    /// What `.millisecondsSince1970` reads back exactly; a date beyond Int64 is clamped.
    static func milliseconds(_ date: Date) -> Int64 {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        return milliseconds >= 9.2e18 ? Int64.max : milliseconds <= -9.2e18 ? Int64.min : Int64(milliseconds)
    }

    mutating func raw(_ name: String, _ json: String) {
        key(name)
        text.append(json)
    }

    mutating func close() -> String {
        text.append("}")
        return text
    }

    /// A JSON string: quotes, backslashes and control characters escaped.
    static func quote(_ value: String, into text: inout String) {
        text.append("\"")
        var plain = true
        for unit in value.utf8 where unit < 0x20 || unit == 0x22 || unit == 0x5C {
            plain = false
            break
        }
        if plain {
            text.append(value)
        } else {
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": text.append("\\\"")
                case "\\": text.append("\\\\")
                case "\n": text.append("\\n")
                case "\r": text.append("\\r")
                case "\t": text.append("\\t")
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    text.append("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
                default: text.unicodeScalars.append(scalar)
                }
            }
        }
        text.append("\"")
    }

    static func encode(_ event: LifecycleEvent) -> String {
        var json = EventLogJSON()
        json.addFields(of: event)
        return json.close()
    }

    /// An event's fields (keys in the order `JSONEncoder` with `.sortedKeys` writes them).
    /// `derived`: leave out the publisher, the id, the recording date and the original
    /// transaction id, which the compact form (`CompactEvent`) writes its own way.
    mutating func addFields(of event: LifecycleEvent, derived: Bool = false) {
        add("amount", event.amount)
        add("appAccountTokenMatched", event.appAccountTokenMatched)
        add("balance", event.balance)
        add("change", event.change)
        add("consented", event.consented)
        add("currency", event.currency)
        add("customer", event.customer)
        add("customerVersion", event.customerVersion)
        add("effective", event.effective)
        add("environment", event.environment)
        add("expiresDate", event.expiresDate)
        add("familyShared", event.familyShared)
        add("from", event.from)
        add("fromProductId", event.fromProductId)
        add("gracePeriodExpiresDate", event.gracePeriodExpiresDate)
        if !derived { add("id", event.id) }
        add("occurredAt", event.occurredAt)
        add("offerId", event.offerId)
        add("offerIdentifier", event.offerIdentifier)
        add("offerKind", event.offerKind?.rawValue)
        if !derived { add("originalTransactionId", event.originalTransactionId) }
        add("previousBalance", event.previousBalance)
        add("previousExpiresDate", event.previousExpiresDate)
        add("previousRefundMilliunits", event.previousRefundMilliunits)
        add("priceMilliunits", event.priceMilliunits)
        add("priceSource", event.priceSource?.rawValue)
        add("productId", event.productId)
        if !derived { add("publisher", event.publisher) }
        add("reason", event.reason)
        if !derived { add("recordedAt", event.recordedAt) }
        add("reference", event.reference)
        add("provisional", event.provisional)
        add("provisionalUntil", event.provisionalUntil)
        add("imported", event.imported)
        add("confirmed", event.confirmed)
        add("refundMilliunits", event.refundMilliunits)
        add("restored", event.restored)
        add("resubscribed", event.resubscribed)
        add("revocationPercentage", event.revocationPercentage)
        add("revocationType", event.revocationType)
        add("road", event.road)
        add("shared", event.shared)
        add("shortfall", event.shortfall)
        add("storefront", event.storefront)
        add("to", event.to)
        add("toProductId", event.toProductId)
        add("transactionId", event.transactionId)
        add("trial", event.trial)
        add("type", event.type.rawValue)
        add("vouchedBy", event.vouchedBy)
    }

    static func encode(_ pieces: [ReportPiece]) -> String {
        var text = "["
        for (index, piece) in pieces.enumerated() {
            if index > 0 { text.append(",") }
            var json = EventLogJSON()
            json.add("c", piece.currency.isEmpty ? nil : piece.currency)
            json.add("e", piece.environment == .production ? nil : piece.environment.rawValue)
            json.add("f", piece.from)
            json.add("m", piece.monthly)
            json.add("o", piece.offerId.isEmpty ? nil : piece.offerId)
            json.add("p", piece.phase.rawValue)
            json.add("pr", piece.productId.isEmpty ? nil : piece.productId)
            json.add("s", piece.storefront.isEmpty ? nil : piece.storefront)
            json.add("t", piece.to)
            text.append(json.close())
        }
        return text + "]"
    }

    static func encode(_ delta: ReportDelta, customer: String) -> String {
        var json = EventLogJSON()
        if !delta.added.isEmpty { json.raw("a", encode(delta.added)) }
        json.add("c", customer)
        if !delta.removed.isEmpty { json.raw("r", encode(delta.removed)) }
        return json.close()
    }
}

/// Reading the log back fast: the folder reads every entry of every change, so a small parser
/// of the JSON `EventLogJSON` writes (objects, arrays, strings, integers, booleans) stands in
/// for `JSONDecoder`; anything it does not expect (a number with a fraction, an unknown type
/// name) goes to `JSONDecoder` instead, so it never reads an entry differently.
enum EventLogReader {
    indirect enum Value {
        case string(String), integer(Int64), bool(Bool), null
        case array([Value]), object([String: Value])

        var string: String? { if case .string(let value) = self { value } else { nil } }
        var integer: Int64? { if case .integer(let value) = self { value } else { nil } }
        var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
        var date: Date? { integer.map { Date(timeIntervalSince1970: Double($0) / 1000) } }
    }

    struct Unexpected: Error {}

    static func parse(_ text: String) -> Value? {
        var text = text
        return text.withUTF8 { bytes -> Value? in
            var index = 0
            guard let value = try? value(bytes, &index) else { return nil }
            skipSpace(bytes, &index)
            return index == bytes.count ? value : nil
        }
    }

    static func skipSpace(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) {
        while index < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 }
    }

    /// After an element: consumes the comma (false) or the closing byte (true).
    static func closes(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int, with close: UInt8) throws -> Bool {
        skipSpace(bytes, &index)
        guard index < bytes.count else { throw Unexpected() }
        let byte = bytes[index]
        index += 1
        if byte == UInt8(ascii: ",") { return false }
        if byte == close { return true }
        throw Unexpected()
    }

    static func value(_ bytes: UnsafeBufferPointer<UInt8>, _ index: inout Int) throws -> Value {
        skipSpace(bytes, &index)
        guard index < bytes.count else { throw Unexpected() }
        switch bytes[index] {
        case UInt8(ascii: "{"):
            index += 1
            var object: [String: Value] = [:]
            skipSpace(bytes, &index)
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(object)
            }
            while true {
                skipSpace(bytes, &index)
                guard case .string(let key) = try value(bytes, &index) else { throw Unexpected() }
                skipSpace(bytes, &index)
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw Unexpected() }
                index += 1
                object[key] = try value(bytes, &index)
                if try closes(bytes, &index, with: UInt8(ascii: "}")) { return .object(object) }
            }
        case UInt8(ascii: "["):
            index += 1
            var array: [Value] = []
            skipSpace(bytes, &index)
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(array)
            }
            while true {
                array.append(try value(bytes, &index))
                if try closes(bytes, &index, with: UInt8(ascii: "]")) { return .array(array) }
            }
        case UInt8(ascii: "\""):
            index += 1
            let start = index
            var plain = true
            while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                if bytes[index] == UInt8(ascii: "\\") {
                    plain = false
                    index += 1
                }
                index += 1
            }
            guard index < bytes.count else { throw Unexpected() }
            let raw = UnsafeBufferPointer(rebasing: bytes[start..<index])
            index += 1
            if plain { return .string(String(decoding: raw, as: UTF8.self)) }
            // Escapes are rare (the writer escapes only quotes, backslashes and control
            // characters): the standard decoder reads those strings.
            let quoted = "\"" + String(decoding: raw, as: UTF8.self) + "\""
            guard let string = try? JSONDecoder().decode(String.self, from: Data(quoted.utf8)) else { throw Unexpected() }
            return .string(string)
        case UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
            for (word, value) in [("true", Value.bool(true)), ("false", .bool(false)), ("null", .null)] {
                let utf8 = Array(word.utf8)
                if index + utf8.count <= bytes.count, Array(bytes[index..<index + utf8.count]) == utf8 {
                    index += utf8.count
                    return value
                }
            }
            throw Unexpected()
        default:
            var negative = false
            if bytes[index] == UInt8(ascii: "-") {
                negative = true
                index += 1
            }
            var number: Int64 = 0
            var digits = 0
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                // Built with its sign, so Int64.min (a date clamped at the edge) reads too.
                let digit = Int64(bytes[index] - UInt8(ascii: "0"))
                let (times, overflow) = number.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
                guard !overflow, !overflow2 else { throw Unexpected() }
                number = sum
                digits += 1
                index += 1
            }
            // A fraction or an exponent is not what the writer writes.
            guard digits > 0, index >= bytes.count || ![UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index])
            else { throw Unexpected() }
            return .integer(number)
        }
    }

    /// An event, or `nil` when the fast reader does not know it (the caller uses `JSONDecoder`).
    static func event(_ text: String) -> LifecycleEvent? {
        guard case .object(let fields)? = parse(text) else { return nil }
        return event(fields: fields)
    }

    /// An event from its fields by their long names, or `nil` when one is missing, unknown or
    /// of another kind.
    static func event(fields: [String: Value]) -> LifecycleEvent? {
        guard let id = fields["id"]?.string, let typeName = fields["type"]?.string,
            let type = LifecycleEventType(rawValue: typeName), let publisher = fields["publisher"]?.string,
            let customer = fields["customer"]?.string, let occurredAt = fields["occurredAt"]?.date,
            let recordedAt = fields["recordedAt"]?.date
        else { return nil }
        let known: Set<String> = [
            "amount", "appAccountTokenMatched", "balance", "change", "confirmed", "consented", "currency", "customer", "customerVersion",
            "effective",
            "environment", "expiresDate", "familyShared", "from", "fromProductId", "gracePeriodExpiresDate", "id", "imported", "occurredAt",
            "offerId",
            "offerIdentifier", "offerKind", "originalTransactionId", "previousBalance", "previousExpiresDate", "previousRefundMilliunits",
            "priceMilliunits",
            "priceSource", "productId", "provisional", "provisionalUntil", "publisher", "reason", "recordedAt", "reference",
            "refundMilliunits", "restored", "resubscribed",
            "revocationPercentage", "revocationType", "road", "shared", "shortfall", "storefront", "to", "toProductId", "transactionId",
            "trial", "type", "vouchedBy",
        ]
        guard fields.keys.allSatisfy(known.contains) else { return nil }
        var event = LifecycleEvent(
            id: id, type: type, publisher: publisher, customer: customer, occurredAt: occurredAt, recordedAt: recordedAt)
        func int(_ key: String) -> Int? { fields[key]?.integer.map { Int(clamping: $0) } }
        event.amount = int("amount")
        event.appAccountTokenMatched = fields["appAccountTokenMatched"]?.bool
        event.balance = int("balance")
        event.change = fields["change"]?.string
        event.consented = fields["consented"]?.bool
        event.currency = fields["currency"]?.string
        event.customerVersion = int("customerVersion")
        event.effective = fields["effective"]?.string
        event.environment = fields["environment"]?.string
        event.expiresDate = fields["expiresDate"]?.date
        event.familyShared = fields["familyShared"]?.bool
        event.from = fields["from"]?.string
        event.fromProductId = fields["fromProductId"]?.string
        event.gracePeriodExpiresDate = fields["gracePeriodExpiresDate"]?.date
        event.offerId = fields["offerId"]?.string
        event.offerIdentifier = fields["offerIdentifier"]?.string
        if let kind = fields["offerKind"]?.string {
            guard let known = PurchaseFact.OfferKind(rawValue: kind) else { return nil }
            event.offerKind = known
        }
        event.originalTransactionId = fields["originalTransactionId"]?.string
        event.previousBalance = int("previousBalance")
        event.previousExpiresDate = fields["previousExpiresDate"]?.date
        event.previousRefundMilliunits = fields["previousRefundMilliunits"]?.integer
        event.priceMilliunits = fields["priceMilliunits"]?.integer
        if let source = fields["priceSource"]?.string {
            guard let known = PurchaseFact.PriceSource(rawValue: source) else { return nil }
            event.priceSource = known
        }
        event.productId = fields["productId"]?.string
        event.reason = fields["reason"]?.string
        event.reference = fields["reference"]?.string
        event.provisional = fields["provisional"]?.bool
        event.provisionalUntil = fields["provisionalUntil"]?.date
        event.imported = fields["imported"]?.bool
        event.confirmed = fields["confirmed"]?.bool
        event.refundMilliunits = fields["refundMilliunits"]?.integer
        event.restored = fields["restored"]?.bool
        event.resubscribed = fields["resubscribed"]?.bool
        event.revocationPercentage = int("revocationPercentage")
        event.revocationType = fields["revocationType"]?.string
        event.road = fields["road"]?.string
        event.shared = fields["shared"]?.bool
        event.shortfall = int("shortfall")
        event.storefront = fields["storefront"]?.string
        event.to = fields["to"]?.string
        event.toProductId = fields["toProductId"]?.string
        event.transactionId = fields["transactionId"]?.string
        event.trial = fields["trial"]?.bool
        event.vouchedBy = fields["vouchedBy"]?.string
        return event
    }

    /// A change of pieces and whose, or `nil` when the fast reader does not know it.
    static func delta(_ text: String) -> (ReportDelta, String)? {
        guard case .object(let fields)? = parse(text), let customer = fields["c"]?.string,
            fields.keys.allSatisfy({ ["a", "c", "r"].contains($0) })
        else { return nil }
        func pieces(_ key: String) -> [ReportPiece]? {
            guard let value = fields[key] else { return [] }
            guard case .array(let items) = value else { return nil }
            var pieces: [ReportPiece] = []
            for item in items {
                guard case .object(let piece) = item, let phaseName = piece["p"]?.string,
                    let phase = ReportPiece.Phase(rawValue: phaseName),
                    let from = piece["f"]?.date, piece.keys.allSatisfy({ ["c", "e", "f", "m", "o", "p", "pr", "s", "t"].contains($0) })
                else { return nil }
                var environment = ReportEnvironment.production
                if let name = piece["e"] {
                    guard let known = name.string.flatMap(ReportEnvironment.init(rawValue:)) else { return nil }
                    environment = known
                }
                pieces.append(
                    ReportPiece(
                        phase: phase, from: from, to: piece["t"]?.date, productId: piece["pr"]?.string ?? "",
                        offerId: piece["o"]?.string ?? "",
                        storefront: piece["s"]?.string ?? "", currency: piece["c"]?.string ?? "", monthly: piece["m"]?.integer,
                        environment: environment))
            }
            return pieces
        }
        guard let added = pieces("a"), let removed = pieces("r") else { return nil }
        return (ReportDelta(removed: removed, added: added), customer)
    }
}
