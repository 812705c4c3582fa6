import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `receipt`: proves a purchase with Apple (a signed transaction, a transaction id, or an
/// app receipt), settles who owns it, and applies it to the customer. A purchase Apple does
/// not vouch for, or the catalog does not sell, is a result with a `reason`, not a failure.
package struct ReceiptJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    /// The job result clients read.
    package struct Result: Sendable, Hashable, Codable {
        package struct Credits: Sendable, Hashable, Codable {
            package var added: Int
            package var balance: Int
        }

        /// The transfer a claim set off (also this job's memo of it, with `from` always set).
        package struct Transfer: Sendable, Hashable, Codable {
            package var jobId: String
            /// Who held the purchase: told to the publisher's backend, never to an app.
            package var from: String?
            package var to: String
            package var vouchedBy: ClaimRule.Voucher?
        }

        /// What the claim did to the purchase, or in a dry run would do (`ClaimRule`).
        package struct Claim: Sendable, Hashable, Codable {
            package var outcome: ClaimRule.Outcome
            package var heldByAnotherCustomer: Bool
            package var vouchedBy: ClaimRule.Voucher?
            /// When Apple signed the proof the claim was made with (a signed transaction's
            /// `signedDate`, an app receipt's creation date).
            package var proofSignedAt: Date?
            /// Who held the purchase before: told to the publisher's backend, never to an app.
            package var transferredFrom: String?
        }

        package var publisher: String
        package var customer: String
        package var transactionId: String?
        package var originalTransactionId: String?
        package var productId: String?
        package var accessGranted: Bool
        package var offerId: String?
        package var entitlements: [String]
        package var subscription: SubscriptionRecord?
        package var reason: String?
        package var message: String?
        package var credits: Credits
        package var transfer: Transfer?
        /// Under the `share` policy: the customer who held the purchase first.
        package var sharedWith: String?
        /// The coupon the app sent, and whether Apple's transaction shows it was used.
        package var coupon: Coupon?
        /// What the purchase cost (Apple's signed price, else what the app reported).
        package var price: String?
        package var currency: String?
        /// For an app with `finishTransactions`: whether Apple took Finish Transaction for
        /// the consumable whose credits were granted.
        package var finished: Bool?
        package var claim: Claim?
        /// A dry run: nothing was changed; the answer says what the claim would do.
        package var dryRun: Bool?
        /// Access granted from the signed transaction, verified here, while Apple could not be
        /// asked about the subscription: it lasts until `provisionalUntil` unless Apple
        /// confirms it first (a renewal check asks again soon, and with back-off after).
        package var provisional: Bool?
        package var provisionalUntil: Date?
    }

    package struct Coupon: Sendable, Hashable, Codable {
        package var code: String
        /// Whether the code names a campaign of the publisher.
        package var known: Bool
        /// The code names a campaign of this offer, and the transaction carries its App Store
        /// offer code (or, for campaigns of introductory offers, an introductory offer) of
        /// the kind the campaign grants.
        package var applied: Bool
        /// What the campaign grants, when it was applied.
        package var grants: Grants?
        package var message: String?
    }

    /// A campaign's grant: a free period or an introductory price, for `billingCycles` cycles.
    package struct Grants: Sendable, Hashable, Codable {
        package var freePeriod: String?
        package var introductoryPrice: String?
        package var currency: String?
        package var billingCycles: Int
    }

    /// Checks a coupon against the publisher's campaigns and Apple's transaction. A coupon
    /// never refuses a purchase Apple vouches for: the purchase is processed at the price Apple
    /// charged, and the coupon is only reported, an unknown one as unknown.
    static func coupon(_ code: String?, publisher: Publisher, offer: Offer, fact: PurchaseFact) -> Coupon? {
        guard let code else { return nil }
        guard let campaign = publisher.couponCampaigns.first(where: { $0.code == code }) else {
            return Coupon(
                code: code, known: false, applied: false,
                message:
                    "unknown coupon \(code): \(publisher.id) has no such campaign; the purchase was processed at the price Apple charged")
        }
        guard campaign.offerId == offer.offerId else {
            return Coupon(
                code: code, known: true, applied: false, message: "coupon \(code) is for offer \(campaign.offerId), not \(offer.offerId)")
        }
        let used = campaign.appleOfferCode.map { fact.offerIdentifier == $0 } ?? fact.isIntroductoryOffer
        guard used else {
            return Coupon(code: code, known: true, applied: false, message: "Apple's transaction shows no use of coupon \(code)")
        }
        // Apple says how the offer discounts, when it says: it must be the kind promised.
        let expected =
            campaign.freePeriod != nil ? ["FREE_TRIAL"] : campaign.introductoryPrice != nil ? ["PAY_AS_YOU_GO", "PAY_UP_FRONT"] : []
        if let kind = fact.offerDiscountType, !expected.isEmpty, !expected.contains(kind) {
            return Coupon(
                code: code, known: true, applied: false,
                message: "Apple's transaction shows a \(kind) offer, not what coupon \(code) grants")
        }
        let grants = Grants(
            freePeriod: campaign.freePeriod, introductoryPrice: campaign.introductoryPrice, currency: campaign.currency,
            billingCycles: campaign.billingCycles ?? 1)
        return Coupon(code: code, known: true, applied: true, grants: grants, message: nil)
    }

    /// A receipt Apple calls malformed (21002) although it decoded here is retried this many
    /// times at most: Apple's hiccups pass, a receipt mangled on its way here does not.
    static let malformedReceiptAttempts = 3

    func run(_ job: JobContext) async throws -> Result {
        try await ReceiptTimings.measure(.total) { try await prove(job) }
    }

    func prove(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Receipt.self, job.payload)
        let roads = [payload.signedTransaction, payload.appReceipt, payload.appReceipt == nil ? payload.transactionId : nil]
        guard roads.compactMap({ $0 }).count == 1 else {
            throw JobRefusal.invalidPayload("give exactly one of signedTransaction, transactionId and appReceipt")
        }
        guard !payload.customer.isEmpty, payload.customer.utf8.count <= 256 else {
            throw JobRefusal.invalidPayload("customer must be 1 to 256 bytes")
        }
        let publisher = try service.publisher(payload.publisher)
        let offset = try await ReceiptTimings.measure(.apple) { try await service.configuration.clock.offset() }
        let now = Date().addingTimeInterval(offset)

        func refused(
            _ reason: EntitlementDecision.Refusal, _ message: String, fact: PurchaseFact? = nil, claim: Result.Claim? = nil
        ) async throws -> Result {
            let state = try await service.store.load(publisher: publisher.id, customer: payload.customer).state
            return Result(
                publisher: publisher.id, customer: payload.customer, transactionId: fact?.transactionId ?? payload.transactionId,
                originalTransactionId: fact?.originalTransactionId, productId: fact?.productId, accessGranted: false,
                offerId: fact.flatMap { publisher.offer(forProduct: $0.productId)?.offerId }, entitlements: state.entitlements(at: now),
                subscription: nil, reason: reason.rawValue, message: message, credits: .init(added: 0, balance: state.credits.balance),
                claim: claim, dryRun: payload.dryRun == true ? true : nil)
        }

        // 1. What Apple vouches for.
        var evidence = AppleEvidence()
        let primaryId: String
        let reader: AppleReader
        do {
            if let jws = payload.signedTransaction {
                let fact: PurchaseFact
                (reader, fact) = try await ReceiptTimings.measure(.verify) { try await verify(jws, publisher: publisher) }
                evidence.facts = [fact]
                evidence.proofSignedAt = fact.signedDate
                primaryId = fact.transactionId
            } else if let receipt = payload.appReceipt {
                reader = try service.reader(publisher, bundleId: payload.bundleId)
                evidence = try await ReceiptTimings.measure(.apple) { try await reader.receipt(receipt) }
                guard let id = payload.transactionId ?? evidence.facts.max(by: { $0.purchaseDate < $1.purchaseDate })?.transactionId else {
                    return try await refused(.invalidReceipt, "the receipt holds no purchase")
                }
                primaryId = id
            } else {
                reader = try service.reader(publisher, bundleId: payload.bundleId)
                let fact = try await ReceiptTimings.measure(.apple) { try await reader.transaction(id: payload.transactionId ?? "") }
                evidence.facts = [fact]
                primaryId = fact.transactionId
            }
            if payload.appReceipt == nil, let fact = evidence.facts.first, fact.kind == .autoRenewable, reader.gateway.hasServerAPI {
                // The subscription's state now: latest transaction and renewal info.
                do {
                    let status = try await ReceiptTimings.measure(.apple) {
                        try await reader.subscription(originalTransactionId: fact.originalTransactionId, environment: fact.environment)
                    }
                    evidence.merge(status)
                } catch let error as AppStoreError where error.isRetryable {
                    await service.applePause.pause(publisher.id, after: error)
                    guard let until = try await temporaryAccess(for: fact, payload: payload, publisher: publisher, job: job) else {
                        throw error
                    }
                    // Apple is down, slow or limiting past the first retry: the signed
                    // transaction, verified here, proves the purchase; only its fresh status
                    // needed Apple. Granted until then, and asked again soon.
                    evidence.provisionalUntil = until
                    job.logger.warning(
                        "Apple cannot be asked about the subscription: access granted provisionally",
                        metadata: ["until": "\(until)", "error": "\(error.code)"])
                }
            }
        } catch let error as AppStoreError where !error.isRetryable && error.code != .invalidConfiguration {
            // (Apple refusing this server's key, HTTP 401, says nothing of the purchase: the
            // job fails for operators to see, and the customer is not told the proof is bad.)
            let reason: EntitlementDecision.Refusal = error.code == .invalidAppIdentifier ? .wrongBundle : .invalidReceipt
            return try await refused(reason, error.message)
        } catch let error as AppStoreError where error.apiErrorCode == 21002 && job.attempt >= Self.malformedReceiptAttempts {
            return try await refused(
                .invalidReceipt,
                "Apple calls the receipt malformed (verifyReceipt status 21002) after \(job.attempt) attempts; send the receipt as the app got it (base64, URL-encoded in a query)"
            )
        }
        if evidence.subscriptionExpired, !evidence.facts.contains(where: { $0.transactionId == primaryId }) {
            return try await expired(payload: payload, publisher: publisher, job: job) { try await refused($0, $1) }
        }
        guard var primary = evidence.facts.first(where: { $0.transactionId == primaryId }) else {
            return try await refused(.invalidReceipt, "transaction \(primaryId) is not in the receipt")
        }
        if primary.price == nil, let reported = payload.price.flatMap(PurchaseFact.price(reported:)) {
            // Receipts carry no price: the one the app reported is kept for the ledger.
            primary.price = reported
            primary.currency = payload.currency.flatMap(PurchaseFact.currency(reported:))
            primary.priceSource = .reported
            if let index = evidence.facts.firstIndex(where: { $0.transactionId == primaryId }) { evidence.facts[index] = primary }
        }
        guard let offer = publisher.offer(forProduct: primary.productId) else {
            return try await refused(.unknownProduct, "no offer of \(publisher.id) sells \(primary.productId)", fact: primary)
        }
        if let offerId = payload.offerId, offerId != offer.offerId {
            return try await refused(
                .offerMismatch, "product \(primary.productId) buys offer \(offer.offerId), not \(offerId)", fact: primary)
        }
        // Apple's binding of a purchase to an account outranks every transfer policy: the
        // transaction's own token, and the purchase's now (its newest transaction's: an older
        // transaction, from before the token was set again, does not bind it any more).
        let bound = AppAccountToken.current(evidence.facts)
        func allowed(_ fact: PurchaseFact) -> Bool {
            AppAccountToken.allows(fact.appAccountToken, for: payload.customer, publisher: publisher)
                && AppAccountToken.allows(bound[fact.originalTransactionId], for: payload.customer, publisher: publisher)
        }
        guard allowed(primary) else {
            return try await refused(
                .appAccountTokenMismatch, "the purchase was made for another account: its appAccountToken is not \(payload.customer)'s",
                fact: primary)
        }
        evidence.facts.removeAll { !allowed($0) }

        // 2. Who owns it, then apply, one job at a time per original transaction.
        let locked = evidence
        if payload.dryRun == true {
            return try await preview(locked, primary: primary, offer: offer, payload: payload, publisher: publisher, now: now) {
                try await refused($0, $1, fact: primary, claim: $2)
            }
        }
        var result = try await ReceiptTimings.measure(.store) {
            try await store(locked, primary: primary, offer: offer, payload: payload, publisher: publisher, job: job) {
                try await refused($0, $1, fact: primary, claim: $2)
            }
        }
        if primary.kind == .consumable, result.reason == nil, reader.gateway.app.finishTransactions == true {
            result.finished = await finish(primary, gateway: reader.gateway, job: job)
        }
        return result
    }

    /// Finish Transaction for a consumable whose credits this customer holds, when the app
    /// asks for it (`finishTransactions`): the app need not see it again. Each run of the job
    /// asks again (Apple takes a repeat), so a crash before it loses nothing. A failure is
    /// reported, never a reason to fail the job: the credits are granted.
    func finish(_ fact: PurchaseFact, gateway: AppleGateway, job: JobContext) async -> Bool {
        guard let client = gateway.serverAPI(for: fact.environment) else { return false }
        do {
            try await client.finishTransaction(transactionId: fact.transactionId)
            return true
        } catch {
            job.logger.warning(
                "Finish Transaction failed", metadata: ["transactionId": "\(fact.transactionId)", "error": "\(error.message)"])
            return false
        }
    }

    /// A refusal of the claim on the primary purchase, with what the claim decided.
    typealias Refusing = (EntitlementDecision.Refusal, String, Result.Claim?) async throws -> Result

    /// What the claim decides for each purchase (by original transaction id), as `ClaimRule`
    /// says for this road and publisher, from who holds each (`owners`; `sharing`: those the
    /// claimant already shares under `share`).
    func claims(
        _ evidence: AppleEvidence, owners: [String: String], sharing: Set<String>, payload: JobPayloads.Receipt, publisher: Publisher,
        now: Date
    ) -> [String: ClaimRule.Decision] {
        let rule = ClaimRule(road: payload.road, publisher: publisher)
        var decisions: [String: ClaimRule.Decision] = [:]
        for original in Set(evidence.facts.map(\.originalTransactionId)) {
            let facts = evidence.facts.filter { $0.originalTransactionId == original }
            let holder: ClaimRule.Holder =
                switch owners[original] {
                case nil: .nobody
                case payload.customer?: .claimant
                default: sharing.contains(original) ? .claimant : .another
                }
            decisions[original] = rule.decide(
                holder: holder, consumable: facts.contains { $0.kind == .consumable },
                tokenNamesClaimant: AppAccountToken.matches(
                    AppAccountToken.current(facts)[original], customer: payload.customer, publisher: publisher) == true,
                proofSignedAt: evidence.proofSignedAt, now: now)
        }
        return decisions
    }

    /// Who holds each purchase and which of those another customer holds the claimant shares
    /// already, read without writing; a migrated subscription nobody holds yet is its previous
    /// chain's holder's, as `carryMigrations` will make it. `read`: the owners as already read.
    func holders(
        _ evidence: AppleEvidence, payload: JobPayloads.Receipt, publisher: Publisher, read: [String: String]? = nil
    ) async throws -> (owners: [String: String], sharing: Set<String>) {
        let originals = Set(evidence.facts.map(\.originalTransactionId))
        let store = service.store
        var owners: [String: String]
        if let read { owners = read } else { owners = try await store.owners(publisher: publisher.id, originalTransactionIds: originals) }
        for fact in evidence.facts where owners[fact.originalTransactionId] == nil {
            guard let previous = fact.previousOriginalTransactionId, previous != fact.originalTransactionId else { continue }
            owners[fact.originalTransactionId] = try await store.owner(publisher: publisher.id, originalTransactionId: previous)
        }
        var sharing: Set<String> = []
        if publisher.transferPolicy == .share {
            for (original, owner) in owners where owner != payload.customer {
                let holders = try await store.holders(publisher: publisher.id, originalTransactionId: original)
                if holders.contains(payload.customer) { sharing.insert(original) }
            }
        }
        return (owners, sharing)
    }

    /// The claim's answer on the primary purchase; who held it only for the publisher's backend.
    func claimAnswer(
        _ decision: ClaimRule.Decision, holder: String?, evidence: AppleEvidence, payload: JobPayloads.Receipt
    ) -> Result.Claim {
        Result.Claim(
            outcome: decision.outcome, heldByAnotherCustomer: decision.heldByAnotherCustomer, vouchedBy: decision.vouchedBy,
            proofSignedAt: evidence.proofSignedAt,
            transferredFrom: payload.road == .secretKey && decision.outcome == .transfer ? holder : nil)
    }

    /// A dry run: what the claim would do and the access the customer would have, from the
    /// owners and the customer as they stand, writing nothing (no lock, no claim).
    func preview(
        _ verified: AppleEvidence, primary: PurchaseFact, offer: Offer, payload: JobPayloads.Receipt, publisher: Publisher, now: Date,
        refused: Refusing
    ) async throws -> Result {
        var evidence = verified
        evidence.merge(
            AppleEvidence(
                facts: try await service.store.unheldFacts(
                    publisher: publisher.id, originalTransactionIds: Set(evidence.facts.map(\.originalTransactionId)))))
        let (owners, sharing) = try await holders(evidence, payload: payload, publisher: publisher)
        let decisions = claims(evidence, owners: owners, sharing: sharing, payload: payload, publisher: publisher, now: now)
        let primaryDecision = decisions[primary.originalTransactionId] ?? .unheld
        let answer = claimAnswer(primaryDecision, holder: owners[primary.originalTransactionId], evidence: evidence, payload: payload)
        if primaryDecision.outcome == .refused, let reason = primaryDecision.reason {
            return try await refused(reason, primaryDecision.message ?? reason.rawValue, answer)
        }
        evidence.facts.removeAll { decisions[$0.originalTransactionId]?.outcome == .refused }
        // The engine on a copy of the customer: the access the claim would give.
        var state = try await service.store.load(publisher: publisher.id, customer: payload.customer).state
        let engine = EntitlementEngine(publisher: publisher)
        let facts = evidence.inAppliedOrder
        let newest = Dictionary(facts.map { ($0.originalTransactionId, $0.transactionId) }) { _, later in later }
        var applied: [String: EntitlementDecision] = [:]
        for fact in facts {
            let renewal = newest[fact.originalTransactionId] == fact.transactionId ? evidence.renewals[fact.originalTransactionId] : nil
            let moving = decisions[fact.originalTransactionId]?.outcome == .transfer
            applied[fact.transactionId] = engine.apply(fact, renewal: renewal, to: &state, now: now, accessFrom: moving ? now : nil)
        }
        let decision = applied[primary.transactionId]?.standing(of: primary, in: state, now: now)
        return Result(
            publisher: publisher.id, customer: payload.customer, transactionId: primary.transactionId,
            originalTransactionId: primary.originalTransactionId, productId: primary.productId,
            accessGranted: decision?.accessGranted ?? false, offerId: offer.offerId, entitlements: decision?.entitlements ?? [],
            subscription: decision?.subscription, reason: decision?.reason?.rawValue, message: nil,
            credits: .init(added: applied.values.reduce(0) { $0 + $1.creditsAdded }, balance: decision?.creditBalance ?? 0),
            sharedWith: nil, coupon: Self.coupon(payload.couponCode, publisher: publisher, offer: offer, fact: primary),
            price: primary.price, currency: primary.currency, claim: answer, dryRun: true)
    }

    func store(
        _ verified: AppleEvidence, primary: PurchaseFact, offer: Offer, payload: JobPayloads.Receipt, publisher: Publisher,
        job: JobContext, refused: Refusing
    ) async throws -> Result {
        var evidence = verified
        let originals = Set(evidence.facts.map(\.originalTransactionId))
        // The owners, the customer (the write's first attempt starts from it) and this job's
        // memo, read in one round trip; in the locks' own where that may be (one server) and
        // no migrated subscription's holder must be carried over first.
        let request = EntitlementStore.ClaimReadRequest(
            publisher: publisher.id, originalTransactionIds: originals, customer: payload.customer,
            extra: job.memoReads("transfer", legacyField: "transfer"))
        // A migrated subscription's previous chain is locked too: its holder, carried over,
        // must not move meanwhile.
        let carries = EntitlementStore.migrations(of: evidence.facts)
        return try await service.withLocks(
            publisher: publisher.id, originalTransactionIds: originals.union(carries.values), job: job,
            readingForClaim: carries.isEmpty ? request : nil
        ) { tokens, moment in
            let now = moment.now
            let read: EntitlementStore.ClaimRead
            if let claimRead = moment.claimRead {
                read = claimRead
            } else {
                try await service.store.carryMigrations(carries, publisher: publisher.id)
                read = try await service.store.readForClaim(request)
            }
            // Apple's word on a purchase nobody held when it came (a refund the proof, signed
            // before it, does not show), read under the same lock it was kept under.
            evidence.merge(AppleEvidence(facts: read.unheld))
            var (owners, sharing) = try await holders(evidence, payload: payload, publisher: publisher, read: read.owners)
            // Written by this job's earlier run (`requestTransfers`); one that does not decode is
            // said in the log and left out of the result, as it changes no decision.
            var memo: Result.Transfer?
            if let text = JobContext.memo(from: read.extra) {
                do {
                    memo = try JSONDecoder().decode(Result.Transfer.self, from: Data(text.utf8))
                } catch {
                    job.logger.warning("this job's transfer memo does not decode; the result will not name the transfer")
                }
            }
            // The transfer an earlier run asked for has been made (a transfer that succeeds moves
            // the purchase to its claimant), and another customer holds the purchase now: a later
            // claim or transfer took it. That decision is spent, and this run decides afresh on
            // what it reads, its proof checked again, rather than take the purchase back on it.
            if let asked = memo, owners[primary.originalTransactionId] != payload.customer {
                let record = try await service.jobQueue.job(id: asked.jobId, queue: job.queue)
                if record == nil || record?.status == .succeeded { memo = nil }
            }

            // What the claim may do to each purchase: a consumable's credits never move nor
            // double; `keep` leaves it with its holder; an app's claim needs Apple's word that the
            // claimant holds it now. A refused purchase is left out of what is applied.
            func decide() -> [String: ClaimRule.Decision] {
                var decisions = claims(evidence, owners: owners, sharing: sharing, payload: payload, publisher: publisher, now: now)
                if let memo {
                    // This job decided on a transfer in an earlier run and asked for it: that
                    // decision stands (its proof was checked then), moved already or not.
                    decisions[primary.originalTransactionId] = ClaimRule.Decision(
                        outcome: .transfer, heldByAnotherCustomer: true, vouchedBy: memo.vouchedBy)
                }
                return decisions
            }
            func answer(_ decisions: [String: ClaimRule.Decision]) -> Result.Claim {
                var answer = claimAnswer(
                    decisions[primary.originalTransactionId] ?? .unheld, holder: owners[primary.originalTransactionId], evidence: evidence,
                    payload: payload)
                if let memo, answer.outcome == .transfer, payload.road == .secretKey { answer.transferredFrom = memo.from }
                return answer
            }
            var decisions = decide()
            if let refusal = decisions[primary.originalTransactionId], refusal.outcome == .refused, let reason = refusal.reason {
                return try await refused(reason, refusal.message ?? reason.rawValue, answer(decisions))
            }
            // Only what the claim may take becomes the claimant's (nothing before the primary
            // purchase is known to be granted). Every claim is made under the purchase's lock,
            // so one claimed meanwhile means this job's lease ran out and the lock passed on; it
            // is decided again. Off a cluster the claim goes in the customer's write, a round
            // trip fewer: one claimed meanwhile leaves the write undone and the job is run again
            // (`claimTaken`), to decide on what it then reads. A job that asks for a transfer
            // (and so runs again before it writes) claims first, as on a cluster.
            let unclaimed = decisions.filter { owners[$0.key] == nil && $0.value.outcome == .granted }.keys
            let asksForTransfer = decisions.contains { $0.value.outcome == .transfer && owners[$0.key] != payload.customer }
            // Every purchase of the evidence is locked: each claim carries its lock's token, and
            // is refused if a later job took the lock meanwhile (`claim(publisher:locked:for:)`).
            let unclaimedLocks = unclaimed.sorted().compactMap { tokens[$0] }
            guard unclaimedLocks.count == unclaimed.count else {
                throw JobFailure.permanent("internal", "a purchase this job would claim is not under its lock")
            }
            var claiming: [TransactionLock.Token] = []
            if !unclaimed.isEmpty, !asksForTransfer, service.store.claimsInWrite {
                claiming = unclaimedLocks
            } else if !unclaimed.isEmpty {
                let claimed = try await service.store.claim(publisher: publisher.id, locked: unclaimedLocks, for: payload.customer)
                if claimed.values.contains(where: { $0 != payload.customer }) {
                    owners.merge(claimed) { _, new in new }
                    decisions = decide()
                    if let refusal = decisions[primary.originalTransactionId], refusal.outcome == .refused, let reason = refusal.reason {
                        return try await refused(reason, refusal.message ?? reason.rawValue, answer(decisions))
                    }
                }
            }
            let answer = answer(decisions)
            evidence.facts.removeAll { decisions[$0.originalTransactionId]?.outcome == .refused }

            var sharedWith: String?
            let sharingNow = decisions.filter { $0.value.outcome == .share }.keys.sorted()
            for id in sharingNow { try await service.store.addSharer(payload.customer, publisher: publisher.id, originalTransactionId: id) }
            if decisions[primary.originalTransactionId]?.outcome == .share, payload.road == .secretKey {
                sharedWith = owners[primary.originalTransactionId]
            }
            let moving = decisions.filter { $0.value.outcome == .transfer }
            if moving.contains(where: { owners[$0.key] != payload.customer }) {
                try await requestTransfers(
                    moving.filter { owners[$0.key] != payload.customer }, primary: primary.originalTransactionId, owners: owners,
                    verified: evidence.facts, publisher: publisher, payload: payload, job: job)
            }

            let fence = tokens[primary.originalTransactionId]
            let keepsReceipt =
                try payload.appReceipt != nil && evidence.latestReceipt != nil
                && !service.reader(publisher, bundleId: primary.bundleId).gateway.hasServerAPI
            let (decisionsByTransaction, after) = try await service.apply(
                evidence, publisher: publisher, customer: payload.customer, fence: fence, now: now,
                sharing: Set(sharingNow), imported: payload.imported == true, importWebhooks: payload.importWebhooks == true,
                snapshot: read.snapshot, claiming: claiming, closing: moment.closing,
                lastWriteUnderLocks: !keepsReceipt && read.unheld.isEmpty, job: job)
            // Held now: Apple's word reaches the claimant directly from here on. Forgotten under
            // the lock, so no claim after this one merges a view older than what Apple says next.
            let heldNow = Set(read.unheld.map(\.originalTransactionId)).filter { id in
                (owners[id] == nil || owners[id] == payload.customer) && decisions[id].map { $0.outcome != .refused } ?? true
            }
            try await service.store.forgetUnheld(publisher: publisher.id, originalTransactionIds: heldNow)
            if keepsReceipt, let receipt = evidence.latestReceipt {
                // Kept for the purchases the claim applied, not those it refused, and only
                // where a renewal check must ask verifyReceipt again: subscriptions of an app
                // without an App Store Server API key (the statuses answer for the others).
                try await service.store.keepReceipt(
                    receipt, publisher: publisher.id,
                    originalTransactionIds: Set(evidence.facts.filter { $0.kind == .autoRenewable }.map(\.originalTransactionId)))
            }
            let decision = decisionsByTransaction[primary.transactionId]?.standing(of: primary, in: after, now: now)
            let expiredMessage =
                evidence.subscriptionExpired && decision?.accessGranted != true
                ? "Apple says the receipt is valid but the subscription has expired (verifyReceipt status 21006)" : nil
            var transfer = memo
            if payload.road == .appKey { transfer?.from = nil }
            // A grant is told only where it gave access: a refusal (a refund already known) is none.
            let provisionalUntil = decision?.accessGranted == true ? evidence.provisionalUntil : nil
            var subscription = decision?.subscription
            subscription?.provisionalUntil = provisionalUntil
            var result = Result(
                publisher: publisher.id, customer: payload.customer, transactionId: primary.transactionId,
                originalTransactionId: primary.originalTransactionId, productId: primary.productId,
                accessGranted: decision?.accessGranted ?? false, offerId: offer.offerId, entitlements: decision?.entitlements ?? [],
                subscription: subscription, reason: decision?.reason?.rawValue, message: expiredMessage,
                credits: .init(
                    added: decisionsByTransaction.values.reduce(0) { $0 + $1.creditsAdded }, balance: decision?.creditBalance ?? 0),
                transfer: transfer, sharedWith: sharedWith,
                coupon: Self.coupon(payload.couponCode, publisher: publisher, offer: offer, fact: primary), price: primary.price,
                currency: primary.currency, claim: answer)
            if let provisionalUntil {
                result.provisional = true
                result.provisionalUntil = provisionalUntil
            }
            return result
        }
    }

    /// Until when access may be granted from a signed transaction verified here while
    /// Apple cannot be asked about its subscription, or nil: only past the job's first
    /// retry, for the publisher's `temporaryAccessHours` (0: never), never past the
    /// transaction's own expiry, never for a dry run, a bare transaction id or a receipt.
    func temporaryAccess(
        for fact: PurchaseFact, payload: JobPayloads.Receipt, publisher: Publisher, job: JobContext
    ) async throws
        -> Date?
    {
        guard payload.signedTransaction != nil, payload.dryRun != true, job.attempt >= 2, publisher.temporaryAccessHours > 0,
            fact.revocationDate == nil, let expires = fact.expiresDate
        else { return nil }
        let now = try await service.configuration.clock.now()
        let until = min(expires, now.addingTimeInterval(Double(publisher.temporaryAccessHours) * 3600))
        return until > now ? until : nil
    }

    /// verifyReceipt answered a bare 21006: the receipt is valid, its subscription has
    /// expired, and no transaction is named. The subscription the app named (its
    /// `transactionId`), when the customer holds it, is recorded as expired now; the answer
    /// says so either way.
    func expired(
        payload: JobPayloads.Receipt, publisher: Publisher, job: JobContext,
        refused: (EntitlementDecision.Refusal, String) async throws -> Result
    ) async throws -> Result {
        let message = "Apple says the receipt is valid but the subscription has expired (verifyReceipt status 21006)"
        let state = try await service.store.load(publisher: publisher.id, customer: payload.customer).state
        guard payload.dryRun != true, let id = payload.transactionId, let known = state.transactions[id], known.kind == .autoRenewable,
            state.subscriptions[known.originalTransactionId] != nil
        else { return try await refused(.expired, message) }
        let original = known.originalTransactionId
        let engine = EntitlementEngine(publisher: publisher)
        let decision = try await service.withLocks(publisher: publisher.id, originalTransactionIds: [original], job: job) {
            tokens, moment in
            try await service.change(
                publisher: publisher, customer: payload.customer, fence: tokens[original], now: moment.now,
                job: job
            ) { state in engine.expire(originalTransactionId: original, at: moment.now, in: &state) }
        }
        return Result(
            publisher: publisher.id, customer: payload.customer, transactionId: id, originalTransactionId: original,
            productId: known.productId, accessGranted: false, offerId: decision.offerId, entitlements: decision.entitlements,
            subscription: decision.subscription, reason: EntitlementDecision.Refusal.expired.rawValue, message: message,
            credits: .init(added: 0, balance: decision.creditBalance))
    }

    /// Verifies a signed transaction with the verifier of whichever app it is for (the
    /// configuration's one loop over the publisher's apps, which the API uses too).
    func verify(_ jws: String, publisher: Publisher) async throws -> (AppleReader, PurchaseFact) {
        let (transaction, gateway) = try await service.configuration.verified(publisher: publisher, what: "transaction") {
            verifier throws(AppStoreError) in try await verifier.verifyTransaction(jws)
        }
        let reader = AppleReader(gateway: gateway, publisher: publisher)
        return (reader, try reader.fact(transaction))
    }

    /// How many transfers one claim asks for, one after another, for one purchase that keeps
    /// changing hands while it waits, before it gives up.
    static let maximumTransferRequests = 16

    /// Asks for each purchase another customer holds to be transferred (as `transfer`
    /// jobs, saying who asked and why Apple's word was taken), then waits its turn: the job
    /// runs again once they are done.
    func requestTransfers(
        _ moving: [String: ClaimRule.Decision], primary: String, owners: [String: String], verified: [PurchaseFact],
        publisher: Publisher, payload: JobPayloads.Receipt, job: JobContext
    ) async throws {
        for (originalTransactionId, decision) in moving.sorted(by: { $0.key < $1.key }) {
            guard let owner = owners[originalTransactionId] else { continue }
            var transfer = JobPayloads.Transfer(
                publisher: publisher.id, originalTransactionId: originalTransactionId, to: payload.customer, from: owner,
                road: payload.road, vouchedBy: decision.vouchedBy,
                appAccountTokenMatched: AppAccountToken.matches(
                    AppAccountToken.current(verified)[originalTransactionId], customer: payload.customer, publisher: publisher),
                appAccountTokenSignedAtMs: AppAccountToken.binding(verified)[originalTransactionId]?.signedDate.map {
                    AppleTimestamp($0).milliseconds
                })
            transfer.imported = payload.imported
            transfer.importWebhooks = payload.importWebhooks
            // One request per run of this job (a rerun after a crash finds its own under its key).
            // A request of an earlier run that has finished while another customer holds the
            // purchase (a third claim took it meanwhile) is followed by a new one, keyed by the
            // one it follows: the same walk on every run, never a wait for a job that is done.
            var key = "transfer:\(job.id):\(originalTransactionId)"
            var enqueued = try await service.jobQueue.enqueue(try EnqueueRequest(transfer, queue: job.queue, idempotencyKey: key))
            for hop in 0... {
                let record = try await service.jobQueue.job(id: enqueued.id, queue: job.queue)
                if let record, record.status == .failed {
                    throw JobRefusal.notPossible(
                        code: "transferFailed", "transfer job \(enqueued.id) failed: \(record.lastError ?? "no reason recorded")")
                }
                // Still to run (or running): wait for it. Done (or its record gone): ask again.
                if let record, record.status != .succeeded { break }
                guard hop + 1 < Self.maximumTransferRequests else {
                    throw JobRefusal.notPossible(
                        code: "transferContended",
                        "the purchase changed hands \(Self.maximumTransferRequests) times while this claim waited for it")
                }
                key = "transfer:\(job.id):\(originalTransactionId):after:\(enqueued.id)"
                enqueued = try await service.jobQueue.enqueue(try EnqueueRequest(transfer, queue: job.queue, idempotencyKey: key))
            }
            if originalTransactionId == primary {
                // The result names the transfer of the purchase the claim is about.
                let memo = Result.Transfer(jobId: enqueued.id, from: owner, to: payload.customer, vouchedBy: decision.vouchedBy)
                try await job.setMemo("transfer", try JobPayloads.encode(memo))
            }
        }
        throw JobFailure.deferred(
            "transferring", "waiting for the transfer of a purchase another customer holds", after: .milliseconds(200))
    }
}
