import Entitlements
import Foundation

extension JobPayloads {
    /// `spend`: the publisher's app used some of a customer's credits.
    package struct Spend: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .spend }

        package var publisher: String
        package var customer: String
        /// How many credits, at least 1.
        package var amount: Int
        /// The publisher's key for this use: a repeat spends once.
        package var reference: String

        package init(publisher: String, customer: String, amount: Int, reference: String) {
            self.publisher = publisher
            self.customer = customer
            self.amount = amount
            self.reference = reference
        }
    }
}

extension JobPayloads {
    /// `app-account-token`: tell Apple which customer a purchase belongs to (Set App Account
    /// Token), so its later transactions and notifications carry the token.
    package struct AppAccountToken: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .appAccountToken }

        package var publisher: String
        package var originalTransactionId: String
        /// A UUID: the customer's `appAccountToken`.
        package var appAccountToken: String
        /// Which app, when the publisher has several.
        package var bundleId: String?

        package init(publisher: String, originalTransactionId: String, appAccountToken: String, bundleId: String? = nil) {
            self.publisher = publisher
            self.originalTransactionId = originalTransactionId
            self.appAccountToken = appAccountToken
            self.bundleId = bundleId
        }
    }
}

extension JobPayloads.AppAccountToken {
    /// A request to bind a purchase to a customer's token, checked as the API and the CLI
    /// take it: the App Store's digits, a UUID (sent lowercased), an app of the publisher.
    /// Throws `JobRefusal.invalidPayload` with a message for the caller.
    package static func checked(
        publisher: Publisher, originalTransactionId: String, appAccountToken: String, bundleId: String?
    ) throws(JobRefusal) -> Self {
        guard (1...32).contains(originalTransactionId.count), originalTransactionId.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw .invalidPayload("originalTransactionId must be the App Store's digits")
        }
        guard appAccountToken.utf8.count <= 64, let token = UUID(uuidString: appAccountToken) else {
            throw .invalidPayload("appAccountToken must be a UUID")
        }
        if let bundleId, publisher.app(bundleId: bundleId) == nil {
            throw .invalidPayload("publisher \(publisher.id) has no app \(bundleId)")
        }
        return Self(
            publisher: publisher.id, originalTransactionId: originalTransactionId, appAccountToken: token.uuidString.lowercased(),
            bundleId: bundleId)
    }

    /// One job per purchase at a time, whoever asks (the API or the CLI).
    package var uniqueKey: String { "token:\(publisher):\(originalTransactionId)" }
}

extension JobPayloads {
    /// `consumption`: answers Apple's `CONSUMPTION_REQUEST` about a transaction (Send
    /// Consumption Information), from the notification's verified signed transaction.
    package struct Consumption: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .consumption }

        package var publisher: String
        package var transactionId: String
        package var bundleId: String?
        /// The notification's signed transaction; verified again.
        package var signedTransaction: String
        /// When Apple signed the request (the notification's `signedDate`): Apple waits 12 hours.
        package var requestedAt: Date
        /// Apple's `consumptionRequestReason` (`UNINTENDED_PURCHASE`, ...).
        package var reason: String?

        package init(
            publisher: String, transactionId: String, bundleId: String?, signedTransaction: String, requestedAt: Date, reason: String?
        ) {
            self.publisher = publisher
            self.transactionId = transactionId
            self.bundleId = bundleId
            self.signedTransaction = signedTransaction
            self.requestedAt = requestedAt
            self.reason = reason
        }
    }
}

extension JobPayloads {
    /// `reconcile`: pages through Apple's Notification History for each of the publisher's
    /// apps with an App Store Server API key and queues every notification not yet applied,
    /// as if it had arrived. Without `since`, from where the last reconcile ended.
    package struct Reconcile: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .reconcile }

        package var publisher: String
        package var since: Date?
        package var until: Date?

        package init(publisher: String, since: Date? = nil, until: Date? = nil) {
            self.publisher = publisher
            self.since = since
            self.until = until
        }
    }
}

extension JobPayloads {
    /// `resync`: rebuilds a customer's purchases from Apple (Get Transaction History and Get
    /// All Subscription Statuses), for the purchases the customer holds.
    package struct Resync: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .resync }

        package var publisher: String
        package var customer: String

        package init(publisher: String, customer: String) {
            self.publisher = publisher
            self.customer = customer
        }

        /// One resync of a customer at a time (a long id by its FNV-1a digest: keys hold 256 bytes).
        package var uniqueKey: String {
            guard customer.utf8.count > 160 else { return "resync:\(publisher):\(customer)" }
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in customer.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            return "resync:\(publisher):#" + String(hash, radix: 16)
        }
    }

    /// A push to fan out (`push`).
    package struct Push: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .push }

        package var publisher: String
        package var pushId: String

        package init(publisher: String, pushId: String) {
            self.publisher = publisher
            self.pushId = pushId
        }

        /// One fan-out per push.
        package var uniqueKey: String { "push:\(publisher):\(pushId)" }
    }

    /// One batch of a push's audience (`push-batch`).
    package struct PushBatch: EntitlementJobPayload, Hashable {
        package static var jobType: EntitlementJobType { .pushBatch }

        package var publisher: String
        package var pushId: String
        package var batch: Int

        package init(publisher: String, pushId: String, batch: Int) {
            self.publisher = publisher
            self.pushId = pushId
            self.batch = batch
        }

        /// Each batch is queued once, however often the fan-out runs.
        package var idempotencyKey: String { "push-batch:\(publisher):\(pushId):\(batch)" }
    }
}
