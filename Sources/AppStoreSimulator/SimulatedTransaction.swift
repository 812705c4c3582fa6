import AppStore
import Foundation

/// One transaction the simulator sold, as Apple keeps it: the transaction fields (signed
/// afresh, with the current `signedDate`, each time they are served) and who bought it.
struct SimulatedTransaction: Sendable {
    var transaction: JWSTransaction
    /// The Apple account that bought it; receipts and history are per account and app.
    var account: String
    var orderId: String
    var isTrialPeriod = false
    var isInIntroOfferPeriod = false
    /// What the developer sent with Send Consumption Information (V2), and with V1.
    var consumption: ConsumptionRequest?
    var consumptionV1: ConsumptionRequestV1?
    /// Set when a consumption request is outstanding.
    var consumptionRequested = false
    /// When Apple asked (the developer has 12 hours to answer).
    var consumptionRequestedAt: Date?
    /// When the publisher's server called Finish Transaction for it.
    var finishedAt: Date?

    var id: String { transaction.transactionId ?? "" }
    var environment: AppStoreEnvironment { transaction.environment ?? .sandbox }
    var isRevoked: Bool { transaction.revocationDate != nil }
}
