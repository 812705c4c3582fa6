import Foundation

/// The payloads of the entitlement job types (`Jobs/*.schema.json` documents them).
public enum JobPayloads {
    /// `receipt`: a purchase to prove and apply. Exactly one of `signedTransaction`,
    /// `transactionId` and `appReceipt`.
    public struct Receipt: Sendable, Hashable, Codable {
        public var publisher: String
        public var customer: String
        public var signedTransaction: String?
        public var transactionId: String?
        /// Base64 app receipt; with `transactionId`, the purchase in it this job is about.
        public var appReceipt: String?
        /// Which app, when the publisher has several and a transaction id alone is given.
        public var bundleId: String?
        /// The offer the app says was bought: checked against the product.
        public var offerId: String?
        public var couponCode: String?
        /// What the app says the customer paid (Cloud Softphone's `price`, `currency`), for
        /// the ledger when Apple's data carries no price.
        public var price: String?
        public var currency: String?
        /// The app key (its id) that posted the purchase: an app reads only the jobs it created.
        public var appKey: String?

        public init(
            publisher: String, customer: String, signedTransaction: String? = nil, transactionId: String? = nil,
            appReceipt: String? = nil, bundleId: String? = nil, offerId: String? = nil, couponCode: String? = nil,
            price: String? = nil, currency: String? = nil, appKey: String? = nil
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
        }
    }

    /// `transfer`: move a purchase to another customer (the publisher's policy permitting).
    public struct Transfer: Sendable, Hashable, Codable {
        public var publisher: String
        public var originalTransactionId: String
        public var to: String
        /// The holder the requester saw; the recorded owner wins when they differ.
        public var from: String?

        public init(publisher: String, originalTransactionId: String, to: String, from: String? = nil) {
            self.publisher = publisher
            self.originalTransactionId = originalTransactionId
            self.to = to
            self.from = from
        }
    }

    /// `refund`: learn a transaction's refund state from Apple (or from a verified
    /// notification's signed transaction) and apply it: a refund, a family revocation, or
    /// a reversed refund.
    public struct Refund: Sendable, Hashable, Codable {
        public var publisher: String
        public var transactionId: String
        public var originalTransactionId: String?
        public var bundleId: String?
        /// A signed transaction carrying the refund (from a notification); verified again.
        public var signedTransaction: String?
    }

    /// `renewal-check`: ask Apple about a subscription and apply what it says.
    public struct RenewalCheck: Sendable, Hashable, Codable {
        public var publisher: String
        public var originalTransactionId: String
    }

    /// `notification`: an App Store Server Notification as received. V2: `signedPayload`;
    /// V1: the body as it came (`v1`).
    public struct Notification: Sendable, Hashable, Codable {
        public var publisher: String
        public var signedPayload: String?
        /// The V1 body, as JSON text.
        public var v1: String?

        public init(publisher: String, signedPayload: String? = nil, v1: String? = nil) {
            self.publisher = publisher
            self.signedPayload = signedPayload
            self.v1 = v1
        }
    }

    /// `webhook`: one event to post to the publisher.
    public struct Webhook: Sendable, Hashable, Codable {
        public var publisher: String
        /// The event document (JSON text), posted as is.
        public var event: String
        public var eventId: String

        public init(publisher: String, event: String, eventId: String) {
            self.publisher = publisher
            self.event = event
            self.eventId = eventId
        }
    }

    static func decode<Payload: Decodable>(_ type: Payload.Type, _ text: String) throws -> Payload {
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
    public static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}
