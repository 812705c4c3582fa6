import Entitlements
import Foundation

/// The event log's compact entry (field `E`): the long form's JSON (`EventLogJSON`, field
/// `e`) with short names, and without what the reader knows or derives. An event is kept for
/// the publisher's retention (400 days unless set) and was about 470 bytes long, half of it
/// names and repeats; compact, about 200.
///
/// - the publisher: the stream is the publisher's;
/// - the id, when it is `publisher:customer:type:key` (as `LifecycleEvents` makes them): `k`
///   is the key, left out when it is the transaction id; any other id is written whole (`I`);
/// - the recording date: `r`, milliseconds after `occurredAt` (`R`, the date itself, where
///   that does not fit);
/// - the original transaction id, when it is the transaction id (`ot` is `null` when there
///   is a transaction id but no original one).
enum CompactEvent {
    /// The long form's names and their short ones. Written to Redis: never change one; a new
    /// field takes a name not used before.
    static let shortNames: [String: String] = [
        "amount": "am", "appAccountTokenMatched": "aa", "balance": "ba", "change": "ch", "confirmed": "cf", "consented": "co",
        "currency": "cu", "customer": "c", "customerVersion": "v", "effective": "ef", "environment": "en", "expiresDate": "x",
        "familyShared": "fs", "from": "fr", "fromProductId": "fp", "gracePeriodExpiresDate": "g", "imported": "im",
        "occurredAt": "o", "offerId": "of", "offerIdentifier": "oi", "offerKind": "ok", "originalTransactionId": "ot",
        "previousBalance": "pb", "previousExpiresDate": "px",
        "previousRefundMilliunits": "pr", "priceMilliunits": "pm", "priceSource": "ps", "productId": "p",
        "provisional": "pv", "provisionalUntil": "pu", "reason": "re", "reference": "rf", "refundMilliunits": "rm",
        "restored": "ro", "resubscribed": "rs", "revocationPercentage": "rp", "revocationType": "rt", "road": "rd", "shared": "sh",
        "shortfall": "sf", "storefront": "s", "to": "to", "toProductId": "tp", "transactionId": "t", "trial": "tr", "type": "y",
        "vouchedBy": "vb",
    ]
    static let longNames = Dictionary(uniqueKeysWithValues: shortNames.map { ($0.value, $0.key) })

    static func idPrefix(publisher: String, customer: String, type: LifecycleEventType) -> String {
        "\(publisher):\(customer):\(type.rawValue):"
    }

    static func encode(_ event: LifecycleEvent) -> String {
        var json = EventLogJSON(names: shortNames)
        json.addFields(of: event, derived: true)
        let prefix = idPrefix(publisher: event.publisher, customer: event.customer, type: event.type)
        if event.id.hasPrefix(prefix) {
            let key = String(event.id.dropFirst(prefix.count))
            if key != event.transactionId { json.add("k", key) }
        } else {
            json.add("I", event.id)
        }
        let (after, overflow) = EventLogJSON.milliseconds(event.recordedAt).subtractingReportingOverflow(
            EventLogJSON.milliseconds(event.occurredAt))
        if overflow { json.add("R", event.recordedAt) } else { json.add("r", after) }
        if event.originalTransactionId != event.transactionId {
            if let original = event.originalTransactionId {
                json.add("ot", original)
            } else {
                json.raw("ot", "null")
            }
        }
        return json.close()
    }

    /// The event a compact entry of `publisher`'s log holds, or `nil` when it is not one (a
    /// field missing or of another kind).
    static func decode(_ text: String, publisher: String) -> LifecycleEvent? {
        guard case .object(let compact)? = EventLogReader.parse(text) else { return nil }
        var fields: [String: EventLogReader.Value] = ["publisher": .string(publisher)]
        var key: String?
        var recorded: EventLogReader.Value?
        var originalGiven = false
        for (name, value) in compact {
            switch name {
            case "k": key = value.string
            case "I": fields["id"] = value
            case "r", "R": recorded = value
            case "ot":
                originalGiven = true
                if case .null = value { continue }
                fields["originalTransactionId"] = value
            default:
                // A name a later version added: left out, as the long form's reader leaves out
                // a key it does not know.
                guard let long = longNames[name] else { continue }
                fields[long] = value
            }
        }
        guard let customer = fields["customer"]?.string, let typeName = fields["type"]?.string,
            let type = LifecycleEventType(rawValue: typeName), let occurred = fields["occurredAt"]?.integer,
            let recorded = recorded?.integer
        else { return nil }
        if compact["r"] != nil {
            let (sum, overflow) = occurred.addingReportingOverflow(recorded)
            guard !overflow else { return nil }
            fields["recordedAt"] = .integer(sum)
        } else {
            fields["recordedAt"] = .integer(recorded)
        }
        if fields["id"] == nil {
            guard let key = key ?? fields["transactionId"]?.string else { return nil }
            fields["id"] = .string(idPrefix(publisher: publisher, customer: customer, type: type) + key)
        }
        if !originalGiven, let transaction = fields["transactionId"] { fields["originalTransactionId"] = transaction }
        return EventLogReader.event(fields: fields)
    }
}
