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
