import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `notification`: an App Store Server Notification. V2 payloads are verified (and the
/// transaction and renewal info inside them); V1 bodies are not signed, so their receipt is
/// verified with Apple and only its answer is applied. Each notification is applied once
/// (by notificationUUID, or a digest of a V1 body); older data never overwrites newer (the
/// engine orders by signed date). Refunds, revocations and reversals become `refund` jobs;
/// everything else is applied to the customer holding the purchase.
package struct NotificationJobHandler: EntitlementJobHandler {
    /// It does not ask the App Store Server API (a V1 notification asks verifyReceipt, which Apple does not rate limit).
    var asksApple: Bool { false }
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    /// What a notification job did, kept with the job for the result TTL: what the
    /// notification was, how it was handled, and for whom, with the access it left. The
    /// subscription's state is the customer's (`GET /v1/customers/{id}/entitlements`), not
    /// repeated here.
    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var notificationType: String?
        package var subtype: String?
        package var notificationId: String
        package var duplicate: Bool
        /// What was done with it (docs/entitlements.md, "Notification types"): `applied` (its
        /// transaction and renewal info, to the customers holding the purchase), `refund` (a
        /// `refund` job), `recorded` (nothing to apply, on purpose: `message` says why),
        /// `duplicate` (applied before).
        package var handling: String?
        package var customer: String?
        package var originalTransactionId: String?
        package var accessGranted: Bool?
        package var entitlements: [String]?
        /// The `refund` job a refund, revocation or reversal became.
        package var refundJobId: String?
        /// The `consumption` job a `CONSUMPTION_REQUEST` became.
        package var consumptionJobId: String?
        /// The webhook job a publisher-level event (`consent_rescinded`) became.
        package var webhookJobId: String?
        package var message: String?
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Notification.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        if let signed = payload.signedPayload {
            return try await version2(signed, publisher: publisher, job: job)
        }
        guard let v1 = payload.v1 else { throw JobRefusal.invalidPayload("give signedPayload (V2) or v1 (the V1 body)") }
        return try await version1(v1, publisher: publisher, job: job)
    }

    // MARK: V2

    func version2(_ signed: String, publisher: Publisher, job: JobContext) async throws -> Result {
        let verified: VerifiedNotification
        let reader: AppleReader
        do {
            let found = try await service.configuration.verified(publisher: publisher, what: "notification") {
                verifier throws(AppStoreError) in try await verifier.verifyNotificationContents(signed)
            }
            (verified, reader) = (found.value, AppleReader(gateway: found.gateway, publisher: publisher))
        } catch {
            throw error.isRetryable ? error : JobRefusal.notPossible(code: "invalidNotification", error.message)
        }
        let type = verified.payload.notificationType?.rawValue
        let subtype = verified.payload.subtype?.rawValue
        guard let uuid = verified.payload.notificationUUID else {
            throw JobRefusal.notPossible(code: "invalidNotification", "the notification has no notificationUUID")
        }
        var result = Result(publisher: publisher.id, notificationType: type, subtype: subtype, notificationId: uuid, duplicate: false)
        if try await service.store.wasApplied(publisher: publisher.id, notification: uuid) {
            result.duplicate = true
            result.handling = "duplicate"
            return result
        }
        if let transaction = verified.transaction {
            result.handling = "applied"
            let fact = try reader.fact(transaction)
            result.originalTransactionId = fact.originalTransactionId
            switch verified.payload.notificationType {
            case .refund?, .revoke?, .refundReversed?:
                guard let signedTransaction = verified.payload.data?.signedTransactionInfo else { break }
                let refund = JobPayloads.Refund(
                    publisher: publisher.id, transactionId: fact.transactionId, originalTransactionId: fact.originalTransactionId,
                    bundleId: fact.bundleId, signedTransaction: signedTransaction)
                result.handling = "refund"
                result.refundJobId =
                    try await service.jobQueue.enqueue(
                        try EnqueueRequest(refund, queue: job.queue, idempotencyKey: "refund:\(publisher.id):\(uuid)")
                    ).id
            default:
                var evidence = AppleEvidence(facts: [fact])
                if let info = verified.renewalInfo {
                    do {
                        let renewal = try AppleFacts.renewal(info)
                        evidence.renewals[renewal.originalTransactionId] = renewal
                    } catch {
                        throw JobRefusal.notPossible(code: "invalidNotification", "the renewal info has no \(error.field)")
                    }
                }
                // The customer a token names, as the API stores it (lower case); a token that is
                // not a UUID names nobody.
                let token = fact.appAccountToken.flatMap { UUID(uuidString: $0) }.map { publisher.canonicalCustomerId($0.uuidString) }
                try await apply(evidence, to: &result, publisher: publisher, appAccountToken: token, job: job)
            }
            if verified.payload.notificationType == .consumptionRequest,
                let signedTransaction = verified.payload.data?.signedTransactionInfo
            {
                var requestedAt = verified.payload.signedDate?.date ?? .distantPast
                if verified.payload.signedDate == nil { requestedAt = try await service.configuration.clock.now() }
                let consumption = JobPayloads.Consumption(
                    publisher: publisher.id, transactionId: fact.transactionId, bundleId: fact.bundleId,
                    signedTransaction: signedTransaction, requestedAt: requestedAt,
                    reason: verified.payload.data?.consumptionRequestReason?.rawValue)
                result.consumptionJobId =
                    try await service.jobQueue.enqueue(
                        try EnqueueRequest(consumption, queue: job.queue, idempotencyKey: "consumption:\(publisher.id):\(uuid)")
                    ).id
            }
        } else {
            result.handling = "recorded"
            result.message = Self.nothingToApply(verified)
            if verified.payload.notificationType == .rescindConsent, publisher.webhook?.posts(name: Self.consentRescinded) == true {
                result.webhookJobId = try await consentRescinded(verified, uuid: uuid, publisher: publisher, job: job)
            }
        }
        try await service.store.markApplied(publisher: publisher.id, notification: uuid)
        return result
    }

    /// The publisher-level webhook event of a `RESCIND_CONSENT`.
    static let consentRescinded = "consent_rescinded"

    /// Posts `consent_rescinded` to the publisher's webhook: a parent or guardian withdrew
    /// consent for the app of one Apple account (Apple's app transaction). It names no
    /// customer (Apple's notification names none); the publisher's backend finds its own
    /// by the app transaction id, which its app sends with StoreKit's AppTransaction.
    func consentRescinded(_ verified: VerifiedNotification, uuid: String, publisher: Publisher, job: JobContext) async throws -> String {
        var body: [String: Any] = [
            "id": "\(Self.consentRescinded):\(uuid)", "event": Self.consentRescinded, "type": Self.consentRescinded,
            "publisher": publisher.id, "notificationUUID": uuid,
            "recordedAt": ISO8601DateFormatter().string(from: try await service.configuration.clock.now()),
        ]
        if let signed = verified.payload.signedDate?.date { body["occurredAt"] = ISO8601DateFormatter().string(from: signed) }
        let app = verified.appTransaction
        let data = verified.payload.appData
        body["appTransactionId"] = app?.appTransactionId
        body["bundleId"] = app?.bundleId ?? data?.bundleId
        body["appAppleId"] = app?.appAppleId ?? data?.appAppleId
        body["environment"] = (app?.receiptType ?? data?.environment)?.rawValue
        let text = String(decoding: try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]), as: UTF8.self)
        let eventId = "\(Self.consentRescinded):\(uuid)"
        return try await service.jobQueue.enqueue(
            try EnqueueRequest(
                JobPayloads.Webhook(publisher: publisher.id, event: text, eventId: eventId), queue: job.queue,
                idempotencyKey: "webhook:\(eventId)")
        ).id
    }

    /// Why a verified notification without a transaction changes no customer: Entitle
    /// records purchases, and these are about the app (consent) or about purchases made
    /// outside the App Store (external purchase tokens, which the publisher reports to Apple).
    static func nothingToApply(_ verified: VerifiedNotification) -> String {
        switch verified.payload.notificationType {
        case .rescindConsent?:
            let app = verified.appTransaction?.appTransactionId.map { " (app transaction \($0))" } ?? ""
            return "consent rescinded for the app\(app): purchases are unchanged; the app restricts what needed consent"
        case .externalPurchaseToken?:
            return "an external purchase token: not an App Store purchase, nothing to apply"
        default:
            return "nothing to apply (no transaction in the notification)"
        }
    }

    // MARK: V1

    /// The V1 fields used: `notification_type`, `password`, `bid`, `unified_receipt.latest_receipt`.
    struct Version1: Decodable {
        struct UnifiedReceipt: Decodable {
            var latestReceipt: String?
            enum CodingKeys: String, CodingKey { case latestReceipt = "latest_receipt" }
        }
        var notificationType: String?
        var password: String?
        var bid: String?
        var originalTransactionId: String?
        var unifiedReceipt: UnifiedReceipt?
        enum CodingKeys: String, CodingKey {
            case notificationType = "notification_type", password, bid
            case originalTransactionId = "original_transaction_id", unifiedReceipt = "unified_receipt"
        }
    }

    func version1(_ body: String, publisher: Publisher, job: JobContext) async throws -> Result {
        let notification: Version1
        do {
            notification = try JSONDecoder().decode(Version1.self, from: Data(body.utf8))
        } catch {
            throw JobRefusal.invalidPayload("the V1 body is not a notification")
        }
        let reader = try service.reader(publisher, bundleId: notification.bid)
        // V1 bodies are not signed; the shared secret they carry is the only sign they are
        // Apple's. The API checks it at the door and queues the body without it; a body that
        // still carries one (queued another way) is checked here.
        if let password = notification.password {
            let secrets = try service.configuration.sharedSecrets(publisher: publisher.id, bundleId: reader.gateway.app.bundleId)
            guard ConstantTime.matchesAny(password, secrets) else {
                throw JobRefusal.notPossible(code: "invalidNotification", "the V1 notification's password is not the app's shared secret")
            }
        }
        let digest = SHA256Hex.of(body)
        var result = Result(
            publisher: publisher.id, notificationType: notification.notificationType, subtype: nil, notificationId: "v1:" + digest,
            duplicate: false)
        if try await service.store.wasApplied(publisher: publisher.id, notification: result.notificationId) {
            result.duplicate = true
            return result
        }
        guard let receipt = notification.unifiedReceipt?.latestReceipt else {
            throw JobRefusal.notPossible(code: "invalidNotification", "the V1 notification carries no latest_receipt")
        }
        var evidence: AppleEvidence
        do {
            evidence = try await reader.receipt(receipt)
        } catch let error as AppStoreError where !error.isRetryable {
            throw JobRefusal.notPossible(
                code: "invalidNotification", "Apple does not vouch for the V1 notification's receipt: \(error.message)")
        }
        if ["REFUND", "REVOKE"].contains(notification.notificationType), let hint = notification.originalTransactionId,
            !evidence.facts.contains(where: { $0.originalTransactionId == hint })
        {
            // The refunded purchase is not in the receipt: a consumable, finished and gone from
            // it. Found by Get Transaction Info (a `refund` job, as V2 refunds), else in the ledger.
            result.originalTransactionId = hint
            try await refundMissingFromReceipt(hint, reader: reader, to: &result, publisher: publisher, job: job)
            try await service.store.markApplied(publisher: publisher.id, notification: result.notificationId)
            return result
        }
        // The subscription the notification is about: the unsigned hint, checked against Apple's answer.
        let latest = evidence.facts.filter { $0.kind == .autoRenewable }.max { $0.purchaseDate < $1.purchaseDate }
        let original =
            notification.originalTransactionId.flatMap { hint in evidence.facts.contains { $0.originalTransactionId == hint } ? hint : nil }
            ?? latest?.originalTransactionId
        if let original { evidence.facts.removeAll { $0.originalTransactionId != original } }
        result.originalTransactionId = original
        // CANCEL is how V1 tells a subscription's refund (and an upgrade's end).
        var unread: [PurchaseFact] = []
        if ["REFUND", "REVOKE", "CANCEL"].contains(notification.notificationType) {
            unread = try await signedViewsOfRefunds(in: &evidence, reader: reader, job: job)
        }
        if let first = unread.first {
            // Queued before the apply: should the apply fail on this last attempt, the refund
            // job still applies Apple's view (the refund with its share) in ten minutes.
            result.refundJobId = try await readLater(unread, publisher: publisher, reader: reader, job: job)
            job.logger.warning(
                "applying a V1 refund without its share: Apple's API did not answer by the last attempt; a refund job reads it later",
                metadata: ["transactionId": "\(first.transactionId)", "refundJobId": "\(result.refundJobId ?? "")"])
        }
        if let original {
            try await signedViewsOfNewPurchases(in: &evidence, original: original, publisher: publisher, reader: reader, job: job)
        }
        try await apply(evidence, to: &result, publisher: publisher, appAccountToken: nil, job: job)
        // The receipt is kept only where renewal checks need verifyReceipt (no API key).
        if let original, let newest = evidence.latestReceipt, result.customer != nil, !reader.gateway.hasServerAPI,
            evidence.facts.contains(where: { $0.originalTransactionId == original && $0.kind == .autoRenewable })
        {
            try await service.store.keepReceipt(newest, publisher: publisher.id, originalTransactionIds: [original])
        }
        try await service.store.markApplied(publisher: publisher.id, notification: result.notificationId)
        return result
    }

    /// A receipt tells a refund's date but not its kind or share (`revocationType`,
    /// `revocationPercentage`): alone, a prorated refund would count as the whole price, and a
    /// V2 notification applied after it only fills them in. Where the App Store Server API is
    /// configured, each refunded transaction's signed view is read (Get Transaction Info) and
    /// merged first, so the refund is right whichever notification comes first. A transaction
    /// Apple does not find, or does not sign as refunded, keeps the receipt's view, as does
    /// the job's last attempt while Apple cannot answer: the V2 notification's signed view then
    /// adjusts the refund's amount (`refund_adjusted`).
    /// Returns the refunds left unread on the last attempt.
    func signedViewsOfRefunds(in evidence: inout AppleEvidence, reader: AppleReader, job: JobContext) async throws -> [PurchaseFact] {
        var unread: [PurchaseFact] = []
        for fact in evidence.facts
        where fact.revocationDate != nil && fact.revocationType == nil && reader.gateway.serverAPI(for: fact.environment) != nil {
            do {
                let signed = try await reader.transaction(id: fact.transactionId, environment: fact.environment)
                // Only a refund Apple signs is taken: anything else stays as the receipt says.
                if signed.revocationDate != nil { evidence.merge(AppleEvidence(facts: [signed])) }
            } catch let error as AppStoreError where !error.isRetryable {
                continue
            } catch is AppStoreError where job.attempt >= job.maxAttempts {
                // Apple still cannot answer: the receipt's word now, the share later.
                unread.append(fact)
            }
        }
        return unread
    }

    /// A receipt tells no price: a purchase it is the first to tell (a renewal, a
    /// resubscription) would be booked at the catalog's price in the catalog's currency, not
    /// what Apple charged in the customer's storefront, and a V2 notification of the same
    /// purchase told after it changes nothing booked. Where the App Store Server API is
    /// configured, the signed view of each purchase the holder does not know yet (the newest
    /// few) is read first (Get Transaction Info): its price, currency and storefront. Apple
    /// not answering leaves the receipt's view.
    func signedViewsOfNewPurchases(
        in evidence: inout AppleEvidence, original: String, publisher: Publisher, reader: AppleReader, job: JobContext
    ) async throws {
        guard reader.gateway.hasServerAPI,
            let holder = try await service.store.holders(publisher: publisher.id, originalTransactionId: original).first
        else { return }
        let known = try await service.store.load(publisher: publisher.id, customer: holder).state.transactions
        let unknown = evidence.facts.filter { known[$0.transactionId] == nil && $0.price == nil }
            .sorted { ($0.purchaseDate, $0.transactionId) > ($1.purchaseDate, $1.transactionId) }.prefix(Self.signedViewsRead)
        for fact in unknown where reader.gateway.serverAPI(for: fact.environment) != nil {
            do {
                evidence.merge(AppleEvidence(facts: [try await reader.transaction(id: fact.transactionId, environment: fact.environment)]))
            } catch let error as AppStoreError {
                // Not held up while Apple cannot answer: the purchase is booked as the receipt
                // tells it (the catalog's price), rather than its access waiting.
                await service.applePause.pause(publisher.id, after: error)
                job.logger.warning(
                    "booking a purchase told by a V1 notification without Apple's signed price",
                    metadata: ["transactionId": "\(fact.transactionId)", "error": "\(error.code)"])
            }
        }
    }

    /// At most this many purchases new to their holder are read signed per V1 notification (a
    /// receipt after a long silence may tell many renewals; the rest keep the catalog's price).
    static let signedViewsRead = 5

    /// A `refund` job for each refund applied without its share, ten minutes on: it reads the
    /// transaction's signed view (Get Transaction Info), and its share adjusts the refund
    /// (`refund_adjusted`) where no V2 notification did first. Returns the first job's id.
    func readLater(_ refunds: [PurchaseFact], publisher: Publisher, reader: AppleReader, job: JobContext) async throws -> String? {
        var first: String?
        for fact in refunds {
            let refund = JobPayloads.Refund(
                publisher: publisher.id, transactionId: fact.transactionId, originalTransactionId: fact.originalTransactionId,
                bundleId: reader.gateway.app.bundleId)
            let refunded = Int64(((fact.revocationDate?.timeIntervalSince1970 ?? 0) * 1000).rounded(.down))
            let key = "refund-share:\(publisher.id):\(fact.transactionId):\(refunded)"
            let enqueued = try await service.jobQueue.enqueue(
                try EnqueueRequest(refund, queue: job.queue, idempotencyKey: key, delay: .seconds(600)))
            first = first ?? enqueued.id
        }
        return first
    }

    /// A V1 REFUND or REVOKE whose purchase the receipt no longer holds. With an App Store
    /// Server API key, a `refund` job learns the refund from Get Transaction Info (verified,
    /// as for V2). Without one, the purchase is looked up in what its holders were credited
    /// with, and refunded as of now: the notification's password is the only proof V1 has.
    func refundMissingFromReceipt(
        _ transactionId: String, reader: AppleReader, to result: inout Result, publisher: Publisher, job: JobContext
    ) async throws {
        if reader.gateway.hasServerAPI {
            let refund = JobPayloads.Refund(
                publisher: publisher.id, transactionId: transactionId, originalTransactionId: transactionId,
                bundleId: reader.gateway.app.bundleId, signedTransaction: nil)
            result.refundJobId =
                try await service.jobQueue.enqueue(
                    try EnqueueRequest(refund, queue: job.queue, idempotencyKey: "refund:\(publisher.id):\(result.notificationId)")
                ).id
            return
        }
        let message = "no customer holds purchase \(transactionId)"
        // Held by nobody: no lock is taken, as before holders were read under it. A transfer
        // needs a holder; a receipt job claiming it meanwhile applies Apple's view it read itself.
        if try await service.store.holders(publisher: publisher.id, originalTransactionId: transactionId).isEmpty {
            result.message = message
            return
        }
        let engine = EntitlementEngine(publisher: publisher)
        // Whom it reaches is read again under the lock: a transfer that ran before it was
        // taken moved the purchase, and its new holder must lose it too.
        let applied = try await service.withLocks(publisher: publisher.id, originalTransactionIds: [transactionId], job: job) {
            tokens, moment -> Applied<EntitlementDecision?>? in
            let holders = try await service.store.holders(publisher: publisher.id, originalTransactionId: transactionId)
            guard let customer = holders.first else { return nil }
            var first: EntitlementDecision?
            for holder in holders {
                let decision = try await service.change(
                    publisher: publisher, customer: holder, fence: tokens[transactionId], now: moment.now,
                    job: job
                ) { state in engine.refund(transactionId: transactionId, at: moment.now, in: &state) }
                first = first ?? decision
            }
            return Applied(customer: customer, decisions: first)
        }
        guard let applied else {
            result.message = message
            return
        }
        result.customer = applied.customer
        result.accessGranted = applied.decisions?.accessGranted
        result.entitlements = applied.decisions?.entitlements
    }

    /// What was applied under a purchase's lock, and to whom first (its owner).
    struct Applied<Decisions: Sendable>: Sendable {
        var customer: String
        var decisions: Decisions
    }

    // MARK: Applying

    /// Applies to the customers holding the purchase (its owner, and those sharing it under
    /// the `share` policy); a purchase nobody holds yet waits for its receipt job (or is
    /// claimed by its appAccountToken when that names customers).
    func apply(
        _ evidence: AppleEvidence, to result: inout Result, publisher: Publisher, appAccountToken: String?, job: JobContext
    ) async throws {
        guard let original = evidence.facts.first?.originalTransactionId else {
            result.message = "the notification names no purchase"
            return
        }
        let message = "no customer holds this purchase yet; its receipt job will apply it"
        let migrations = EntitlementStore.migrations(of: evidence.facts)
        let claimable = publisher.customerIdentity == .appAccountToken && appAccountToken != nil
        // Held by nobody, with nobody to claim it, no holder to carry over and nothing to keep
        // for whoever claims it: no lock is taken, so the purchase's own receipt job (often
        // posted as Apple notifies) is not kept waiting behind this one. A transfer needs a
        // holder. A refund, or newer word on one kept, is kept under the lock
        // (`EntitlementStore.keepUnheld`): a claim with a transaction signed before it would
        // not see it.
        if migrations.isEmpty, !claimable,
            !evidence.facts.contains(where: { $0.originalTransactionId == original && $0.revocationDate != nil }),
            try await service.store.standing(publisher: publisher.id, originalTransactionId: original) == (held: false, kept: false)
        {
            result.message = message
            return
        }
        // Whom it reaches is read again under the lock: a transfer that ran before it was
        // taken moved the purchase, and its new holder is the one Apple's news is for. A
        // migrated subscription's previous chain is locked too: its holder, carried over, must
        // not move.
        let locked = [original] + migrations.values
        let applied = try await service.withLocks(publisher: publisher.id, originalTransactionIds: locked, job: job) {
            tokens, moment -> Applied<[String: EntitlementDecision]>? in
            try await service.store.carryMigrations(of: evidence.facts, publisher: publisher.id)
            // Apple's word kept while nobody held the purchase (a refund this notification's
            // view, signed before it, does not show) goes to whoever holds it now, and is
            // forgotten. A keeper that found the purchase claimed as it kept comes this way.
            var (holders, kept) = try await service.store.holdersAndKept(publisher: publisher.id, originalTransactionId: original)
            if holders.isEmpty, publisher.customerIdentity == .appAccountToken, let token = appAccountToken {
                holders = [try await service.store.claim(publisher: publisher.id, originalTransactionId: original, for: token)]
                // A claim as any other, which reads what was kept after claiming: a keeper
                // whose lease ran out, reading after keeping, sees the claim.
                kept = try await service.store.unheldFacts(publisher: publisher.id, originalTransactionIds: [original])
            }
            guard let customer = holders.first else {
                _ = try await service.keepForWhoeverClaims(evidence.facts, publisher: publisher.id, lock: tokens[original], job: job)
                return nil
            }
            var told = evidence
            told.merge(AppleEvidence(facts: kept))
            var first: [String: EntitlementDecision] = [:]
            for (index, holder) in holders.enumerated() {
                let decisions = try await service.apply(
                    told, publisher: publisher, customer: holder, fence: tokens[original], now: moment.now,
                    job: job
                ).decisions
                if index == 0 { first = decisions }
            }
            if !kept.isEmpty { try await service.store.forgetUnheld(publisher: publisher.id, originalTransactionIds: [original]) }
            // A refund or its reversal in Apple's answer (V1 REFUND, CANCEL) reaches former holders' history too.
            try await service.amendFormerHolders(
                evidence.facts, publisher: publisher, originalTransactionId: original, current: holders, fence: tokens[original],
                moment: moment, job: job)
            return Applied(customer: customer, decisions: first)
        }
        guard let applied else {
            result.message = message
            return
        }
        result.customer = applied.customer
        let newest = evidence.facts.max { $0.purchaseDate < $1.purchaseDate }
        let decision = newest.flatMap { applied.decisions[$0.transactionId] }
        result.accessGranted = decision?.accessGranted
        result.entitlements = decision?.entitlements
    }
}
