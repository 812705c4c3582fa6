import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `consumption`: answers Apple's `CONSUMPTION_REQUEST` (a customer asked Apple for a
/// refund) with Send Consumption Information (V2), as the publisher's `consumption` policy
/// says: only when it answers at all and for that offer, only with the customer's consent
/// (Apple: without it, send nothing), and only within Apple's 12 hours. What was delivered
/// and used comes from the customer holding the purchase (`ConsumptionAssessment`).
package struct ConsumptionJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    /// How long Apple waits for an answer after asking.
    static let deadline: TimeInterval = 12 * 3600

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var transactionId: String
        package var customer: String?
        /// Whether Apple was sent (and took) an answer.
        package var sent: Bool
        /// Why nothing was sent: `notAnswered` (the publisher's policy), `offerNotAnswered`,
        /// `familyShared`, `noConsent`, `unknownPurchase` (no customer holds it), `deadlinePassed`.
        package var skipped: String?
        /// What Apple was sent.
        package var deliveryStatus: String?
        package var consumptionPercentage: Int?
        package var refundPreference: String?
        package var sampleContentProvided: Bool?
        /// How the figures were found.
        package var basis: String?
        /// Until when Apple takes the answer.
        package var answerBy: Date
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Consumption.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        var result = Result(
            publisher: publisher.id, transactionId: payload.transactionId, sent: false,
            answerBy: payload.requestedAt.addingTimeInterval(Self.deadline))
        guard let policy = publisher.consumption, policy.answer else {
            result.skipped = "notAnswered"
            return result
        }
        let reader = try service.reader(publisher, bundleId: payload.bundleId)
        let fact: PurchaseFact
        do {
            fact = try await reader.signedTransaction(payload.signedTransaction)
        } catch let error as AppStoreError where !error.isRetryable {
            throw JobRefusal.notPossible(code: "invalidTransaction", "the request's signed transaction: \(error.message)")
        }
        guard fact.transactionId == payload.transactionId else {
            throw JobRefusal.invalidPayload("the signed transaction is \(fact.transactionId), not \(payload.transactionId)")
        }
        guard policy.answers(offerId: publisher.offer(forProduct: fact.productId)?.offerId) else {
            result.skipped = "offerNotAnswered"
            return result
        }
        guard !fact.isFamilyShared else {
            // Apple takes no consumption information about a family-shared transaction (4000185).
            result.skipped = "familyShared"
            return result
        }
        let askedMs = Int64((payload.requestedAt.timeIntervalSince1970 * 1000).rounded(.down))
        if let earlier = try await service.store.consumptionSent(
            publisher: publisher.id, transactionId: fact.transactionId, askedMs: askedMs),
            let sent = try? JSONDecoder.iso8601.decode(Result.self, from: Data(earlier.utf8))
        {
            // Sent before a crash kept this job from finishing: not sent twice.
            return sent
        }
        let now = try await service.configuration.clock.now()
        guard now < result.answerBy else {
            result.skipped = "deadlinePassed"
            return result
        }
        let customer = try await service.store.holders(publisher: publisher.id, originalTransactionId: fact.originalTransactionId).first
        result.customer = customer
        var consented = policy.consent == .terms
        if !consented, let customer {
            consented = try await service.store.consumptionConsent(publisher: publisher.id, customer: customer) ?? false
        }
        guard consented else {
            result.skipped = "noConsent"
            return result
        }
        guard let customer else {
            // Bought before Entitle, or delivered by another system: Entitle cannot say.
            result.skipped = "unknownPurchase"
            return result
        }
        let holder = try await service.store.load(publisher: publisher.id, customer: customer).state
        let assessment = ConsumptionAssessment.assess(fact, holder: holder, now: now)
        var preference = policy.refundPreference.map { RefundPreference(rawValue: $0.rawValue) }
        // Apple: a prorated grant needs a percentage strictly between 0 and 100 % (it computes
        // a subscription's from time); without one, no preference is sent.
        if preference == .grantProrated, fact.kind != .autoRenewable, !(1...99_999).contains(assessment.consumptionPercentage ?? 0) {
            preference = nil
        }
        let request = ConsumptionRequest(
            customerConsented: true, deliveryStatus: assessment.delivered ? .delivered : .undeliveredOther,
            sampleContentProvided: policy.sampleContentProvided, consumptionPercentage: assessment.consumptionPercentage,
            refundPreference: preference)
        guard let client = reader.gateway.serverAPI(for: fact.environment) else {
            throw JobRefusal.notPossible(code: "noServerAPI", "app \(reader.gateway.app.bundleId) has no App Store Server API key")
        }
        do {
            try await client.sendConsumptionInformation(transactionId: fact.transactionId, request)
        } catch {
            if error.isRetryable { throw error }
            throw JobRefusal.notPossible(code: "apple" + (error.apiErrorCode.map { String($0) } ?? error.code.rawValue), error.message)
        }
        result.sent = true
        result.deliveryStatus = request.deliveryStatus.rawValue
        result.consumptionPercentage = request.consumptionPercentage
        result.refundPreference = request.refundPreference?.rawValue
        result.sampleContentProvided = request.sampleContentProvided
        result.basis = assessment.basis
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        try await service.store.keepConsumptionSent(
            String(decoding: try encoder.encode(result), as: UTF8.self), publisher: publisher.id, transactionId: fact.transactionId,
            askedMs: askedMs)
        return result
    }
}

extension JSONDecoder {
    /// A decoder of ISO 8601 dates.
    fileprivate static var iso8601: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
