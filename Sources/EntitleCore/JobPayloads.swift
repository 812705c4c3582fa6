import Entitlements
import Foundation

/// The payloads of the entitlement job types (`docs/entitlements.md` documents them).
package enum JobPayloads {
    /// `receipt`: a purchase to prove and apply. Exactly one of `signedTransaction`,
    /// `transactionId` and `appReceipt`.
    package struct Receipt: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .receipt }

        package var publisher: String
        package var customer: String
        package var signedTransaction: String?
        package var transactionId: String?
        /// Base64 app receipt; with `transactionId`, the purchase in it this job is about.
        package var appReceipt: String?
        /// Which app, when the publisher has several and a transaction id alone is given.
        package var bundleId: String?
        /// The offer the app says was bought: checked against the product.
        package var offerId: String?
        package var couponCode: String?
        /// What the app says the customer paid (Cloud Softphone's `price`, `currency`), for
        /// the ledger when Apple's data carries no price.
        package var price: String?
        package var currency: String?
        /// The app key (its id) that posted the purchase: an app reads only the jobs it created,
        /// and its claims on purchases other customers hold follow `ClaimRule`.
        package var appKey: String?
        /// Answer what the claim would do, changing nothing (`POST /v1/purchases?dryRun=true`).
        package var dryRun: Bool?
        /// A purchase the publisher brought with it (`entitle import`): its events are marked
        /// imported, and posted to the webhook only with `importWebhooks`.
        package var imported: Bool?
        package var importWebhooks: Bool?

        package init(
            publisher: String, customer: String, signedTransaction: String? = nil, transactionId: String? = nil,
            appReceipt: String? = nil, bundleId: String? = nil, offerId: String? = nil, couponCode: String? = nil,
            price: String? = nil, currency: String? = nil, appKey: String? = nil, dryRun: Bool? = nil
        ) {
            self.publisher = publisher
            self.customer = customer
            self.signedTransaction = signedTransaction
            self.transactionId = transactionId
            self.appReceipt = appReceipt
            self.bundleId = bundleId
            self.offerId = offerId
            self.couponCode = couponCode
            self.price = price
            self.currency = currency
            self.appKey = appKey
            self.dryRun = dryRun
        }

        /// Who made the claim: an app (its key) or the publisher's backend.
        package var road: ClaimRule.Road { appKey == nil ? .secretKey : .appKey }
    }

    /// `transfer`: move a purchase to another customer (the publisher's policy permitting).
    package struct Transfer: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .transfer }

        package var publisher: String
        package var originalTransactionId: String
        package var to: String
        /// The holder the requester saw; the recorded owner wins when they differ.
        package var from: String?
        /// Who asked for the move: the publisher's backend (`POST /v1/transfers`, a claim with
        /// a secret key) unless an app's claim set off the transfer. Told in the `transfer` event.
        package var road: ClaimRule.Road?
        /// For a move an app's claim set off: why Apple's word was taken (`ClaimRule.Voucher`).
        package var vouchedBy: ClaimRule.Voucher?
        /// Whether the verified proof of the claim carried the new holder's `appAccountToken`
        /// (absent: it carried none, or the publisher does not say how tokens are made).
        package var appAccountTokenMatched: Bool?
        /// When Apple signed the view of the purchase that token came from (ms): a view the
        /// holder keeps, signed later, binds the purchase instead (the token was set again).
        package var appAccountTokenSignedAtMs: Int64?
        /// A move an import's claim set off (`entitle import`): its events are marked
        /// imported, and posted to the webhook only with `importWebhooks`, as the import's own.
        package var imported: Bool?
        package var importWebhooks: Bool?

        package init(
            publisher: String, originalTransactionId: String, to: String, from: String? = nil, road: ClaimRule.Road? = nil,
            vouchedBy: ClaimRule.Voucher? = nil, appAccountTokenMatched: Bool? = nil, appAccountTokenSignedAtMs: Int64? = nil
        ) {
            self.publisher = publisher
            self.originalTransactionId = originalTransactionId
            self.to = to
            self.from = from
            self.road = road
            self.vouchedBy = vouchedBy
            self.appAccountTokenMatched = appAccountTokenMatched
            self.appAccountTokenSignedAtMs = appAccountTokenSignedAtMs
        }
    }

    /// `refund`: learn a transaction's refund state from Apple (or from a verified
    /// notification's signed transaction) and apply it: a refund, a family revocation, or
    /// a reversed refund.
    package struct Refund: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .refund }

        package var publisher: String
        package var transactionId: String
        package var originalTransactionId: String?
        package var bundleId: String?
        /// A signed transaction carrying the refund (from a notification); verified again.
        package var signedTransaction: String?

        package init(
            publisher: String, transactionId: String, originalTransactionId: String? = nil, bundleId: String? = nil,
            signedTransaction: String? = nil
        ) {
            self.publisher = publisher
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.bundleId = bundleId
            self.signedTransaction = signedTransaction
        }
    }

    /// `renewal-check`: ask Apple about a subscription and apply what it says.
    package struct RenewalCheck: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .renewalCheck }

        package var publisher: String
        package var originalTransactionId: String

        package init(publisher: String, originalTransactionId: String) {
            self.publisher = publisher
            self.originalTransactionId = originalTransactionId
        }

        /// The check's job id and idempotency key: one job per subscription and due date (ms,
        /// App Store time), whoever enqueues it (a worker's sweep; a delayed job of an
        /// earlier version).
        package func key(dueMs: Int64) -> String { "renewal-check:\(publisher):\(originalTransactionId):\(dueMs)" }
    }

    /// `notification`: an App Store Server Notification as received. V2: `signedPayload`;
    /// V1: the body as it came (`v1`).
    package struct Notification: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .notification }

        package var publisher: String
        package var signedPayload: String?
        /// The V1 body, as JSON text.
        package var v1: String?

        package init(publisher: String, signedPayload: String? = nil, v1: String? = nil) {
            self.publisher = publisher
            self.signedPayload = signedPayload
            self.v1 = v1
        }

        /// The id of the job that applies the notification Apple identifies as `key` (a V2
        /// notification's UUID, a V1 body's digest): `notification:KEY`, or the key's SHA-256
        /// where it is not a job id's form. Apple's retries and the reconciliation of one
        /// notification find the same job by its id while its record lives (the result TTL once
        /// it succeeds, the dead set's when it failed), without a key of its own; once it is gone
        /// the notification's marker makes a replay change nothing.
        package static func jobId(_ key: String) -> String {
            let plain =
                !key.isEmpty && key.utf8.count <= 100
                && key.utf8.allSatisfy { byte in
                    byte == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                }
            return "notification:" + (plain ? key : SHA256Hex.of(key, bytes: 16))
        }
    }

    /// `webhook`: one event to post to the publisher.
    package struct Webhook: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .webhook }

        package var publisher: String
        /// The event document (JSON text), posted as is.
        package var event: String
        package var eventId: String

        package init(publisher: String, event: String, eventId: String) {
            self.publisher = publisher
            self.event = event
            self.eventId = eventId
        }
    }

    /// The payload's `publisher`, read without decoding the rest (every entitlement payload
    /// names one; ids are letters, digits and `-_.`, so nothing is escaped).
    package static func publisher(in payload: String) -> String? {
        // Bytes, not Foundation's `range(of:)`: that bridges the whole payload (a JWS, kilobytes)
        // to an NSString for every job.
        var payload = payload
        return payload.withUTF8 { bytes -> String? in
            let marker = Array(#""publisher":""#.utf8)
            guard bytes.count > marker.count else { return nil }
            var index = 0
            while index + marker.count <= bytes.count {
                if bytes[index] == marker[0], zip(marker.indices, marker).allSatisfy({ bytes[index + $0] == $1 }) { break }
                index += 1
            }
            guard index + marker.count <= bytes.count else { return nil }
            let start = index + marker.count
            guard let end = bytes[start...].firstIndex(of: UInt8(ascii: "\"")), end > start else { return nil }
            let id = UnsafeBufferPointer(rebasing: bytes[start..<end])
            return id.contains(UInt8(ascii: "\\")) ? nil : String(decoding: id, as: UTF8.self)
        }
    }

    /// Who a job is for, as its payload says (`publisher`, `appKey`, `customer`): the job's
    /// label, kept with its result once the payload is dropped, so readers are still told
    /// apart. `nil` when the payload names no publisher.
    package struct Owner: Codable, Hashable, Sendable {
        package var publisher: String
        package var appKey: String?
        package var customer: String?

        package init(publisher: String, appKey: String? = nil, customer: String? = nil) {
            self.publisher = publisher
            self.appKey = appKey
            self.customer = customer
        }
    }

    /// The label of a job whose payload is `payload` (compact JSON of its `Owner`).
    package static func label(of payload: String) -> String? {
        guard let owner = try? JSONDecoder().decode(Owner.self, from: Data(payload.utf8)) else { return nil }
        return try? encode(owner)
    }

    /// The owner a job's label (or, while it has one, its payload) names.
    package static func owner(label: String?, payload: String) -> Owner? {
        let text = payload.isEmpty ? label ?? "" : payload
        return try? JSONDecoder().decode(Owner.self, from: Data(text.utf8))
    }

    package static func decode<Payload: Decodable>(_ type: Payload.Type, _ text: String) throws -> Payload {
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            return try decoder.decode(Payload.self, from: Data(text.utf8))
        } catch let DecodingError.keyNotFound(key, _) {
            throw JobRefusal.invalidPayload("\(key.stringValue) is missing")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            throw JobRefusal.invalidPayload("\(context.codingPath.map(\.stringValue).joined(separator: ".")) has the wrong type")
        } catch {
            throw JobRefusal.invalidPayload("it is not a JSON object")
        }
    }

    /// JSON text with sorted keys: equal payloads encode to equal text.
    package static func encode(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
