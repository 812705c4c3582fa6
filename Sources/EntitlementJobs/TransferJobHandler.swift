import AppStore
import DurationUnits
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `transfer`: moves a purchase (an original transaction) from the customer holding it to
/// another, as the publisher's policy allows: the new owner's access starts now, the
/// previous owner's ends now. Each step is idempotent, so a rerun after a crash completes it.
package struct TransferJobHandler: EntitlementJobHandler {
    var asksApple: Bool { false }
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    /// Where a transfer stands, for the fault point `EntitlementService.duringTransfer`.
    package enum Step: Sendable {
        /// Whom it moves from and when are kept; nothing is applied yet.
        case kept
        /// The purchase is applied to the new owner; the owner is not changed yet.
        case applied
        /// The purchase's owner is the new one; the previous holder is not released yet.
        case ownerChanged
        /// The previous holder is released; the job is not acknowledged yet.
        case released
    }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var originalTransactionId: String
        package var previousOwner: String
        package var newOwner: String
        package var transferredAt: Date
        package var entitlements: [String]
        /// Set when another job had made the move this one asked for (an app's claim posted
        /// twice): nothing moved, and `transferredAt` is when the new owner's holding began.
        package var movedBefore: Bool?
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Transfer.self, job.payload)
        guard !payload.to.isEmpty, payload.to.utf8.count <= 256 else { throw JobRefusal.invalidPayload("to must be 1 to 256 bytes") }
        let publisher = try service.publisher(payload.publisher)
        let id = payload.originalTransactionId
        return try await service.withLocks(publisher: publisher.id, originalTransactionIds: [id], job: job) { tokens, moment in
            let now = moment.now
            let owner = try await service.store.owner(publisher: publisher.id, originalTransactionId: id)
            // A rerun: this job kept whom it moves the purchase from, then its moment of
            // transfer, before anything moved (a job kept before `transferFrom` was: the
            // request's `from`), and noted its owner change once made (`ownerSet`). Progress is
            // read from those notes, not inferred from the owner alone: the purchase may have
            // come back to `from` meanwhile.
            var stale = false
            if let at = try await job.memo("transferredAt", legacyField: "transferredAt"), owner != nil,
                let from = try await job.memo("transferFrom") ?? payload.from
            {
                let ownerSet = try await job.memo("ownerSet") != nil
                if ownerSet || owner == payload.to {
                    // Its owner change made (or another's to the same customer): what is left is
                    // to release whom it touched that does not hold the purchase now.
                    return try await finish(
                        from: from, at: at, owner: owner, payload: payload, publisher: publisher, fence: tokens[id], now: now, job: job)
                }
                if owner != from {
                    // Another job moved the purchase before this one changed the owner. If this
                    // one had applied the purchase to its target, that holding is released and the
                    // move ends (`movedOn`); otherwise it moves the purchase from its owner now,
                    // at a moment of its own.
                    let target = try await service.store.load(publisher: publisher.id, customer: payload.to).state
                    if target.holds(originalTransactionId: id) {
                        return try await finish(
                            from: from, at: at, owner: owner, payload: payload, publisher: publisher, fence: tokens[id], now: now,
                            job: job)
                    }
                    stale = true
                }
            }
            guard publisher.transferPolicy != .keep else {
                throw JobRefusal.notPossible(code: "transferRefused", "publisher \(publisher.id) keeps purchases with their first owner")
            }
            if owner == payload.to {
                guard payload.road != nil else {
                    // Where another job moved the purchase there first (the same request made
                    // again), a second move would only write a second transfer and date the
                    // holding again.
                    throw JobRefusal.notPossible(code: "alreadyHeld", "\(payload.to) already holds \(id)")
                }
                // An app's claim set this move off, and another job made it first (the app
                // posted the purchase twice): what it asked for holds, and nothing moves. No
                // dead job for an operator to look into.
                let target = try await service.store.load(publisher: publisher.id, customer: payload.to).state
                return Result(
                    publisher: publisher.id, originalTransactionId: id, previousOwner: payload.from ?? "", newOwner: payload.to,
                    transferredAt: target.heldSince[id] ?? now, entitlements: target.entitlements(at: now), movedBefore: true)
            }
            guard let previous = owner else {
                throw JobRefusal.notPossible(code: "notHeld", "no customer of \(publisher.id) holds \(id)")
            }
            let held = try await service.store.load(publisher: publisher.id, customer: previous).state
            let facts = held.transactions.values.filter { $0.originalTransactionId == id }
            guard !facts.isEmpty else { throw JobRefusal.notPossible(code: "notHeld", "\(previous) holds nothing of \(id)") }
            // Apple's binding of a purchase to an account outranks the transfer policy: the
            // token of its newest view (Apple sets it again), the holder's stored one or the
            // claim's verified proof, whichever Apple signed later (a proof kept from before the
            // token was set again does not bind the purchase; Apple's current answer to a claim
            // may carry a token the stored views do not).
            let stored = AppAccountToken.binding(facts)[id]
            let binding = stored?.appAccountToken
            let storedIsNewer =
                stored?.signedDate.map { AppleTimestamp($0).milliseconds > (payload.appAccountTokenSignedAtMs ?? Int64.min) } ?? false
            let claimed = storedIsNewer ? nil : payload.appAccountTokenMatched
            guard claimed ?? AppAccountToken.allows(binding, for: payload.to, publisher: publisher) else {
                throw JobRefusal.notPossible(
                    code: "appAccountTokenMismatch", "\(id) was bought for another account: its appAccountToken is not \(payload.to)'s")
            }
            guard facts.contains(where: { $0.kind != .consumable }) else {
                throw JobRefusal.notPossible(
                    code: "notTransferable", "\(id) is a consumable credited to \(previous): credits are delivered once and never move")
            }
            // Whom it is moved from, then the moment of transfer, are kept (in the job's record)
            // before anything moves: a rerun after the owner change releases that customer
            // (`finish`); one before it moves the purchase with the first run's moment.
            try await job.setMemo("transferFrom", previous)
            let moment = String(AppleTimestamp(now).milliseconds)
            let kept: String
            if stale {
                try await job.setMemo("transferredAt", moment)
                kept = moment
            } else {
                kept = try await job.memo("transferredAt", keepingFirst: moment, legacyField: "transferredAt")
            }
            let transferredAt = Int64(kept).map { AppleTimestamp(milliseconds: $0).date } ?? now
            try await service.duringTransfer?(job, .kept)

            let latest = facts.max { $0.purchaseDate < $1.purchaseDate }
            var moved = LifecycleEvent(
                id: "\(publisher.id):\(id):transfer:\(previous):\(payload.to):\(AppleTimestamp(transferredAt).milliseconds)",
                type: .transfer, publisher: publisher.id, customer: payload.to, occurredAt: transferredAt, recordedAt: now)
            if let latest { moved.describe(latest, offer: publisher.offer(forProduct: latest.productId)) }
            // A move is no sale: its price is on the purchase's own events.
            (moved.priceMilliunits, moved.priceSource) = (nil, nil)
            moved.from = previous
            moved.to = payload.to
            let road = payload.road ?? .secretKey
            moved.road = road.rawValue
            moved.vouchedBy = (payload.vouchedBy ?? (road == .secretKey ? .secretKey : nil))?.rawValue
            // The claim's verified proof says (Apple's current answer may carry a token the stored
            // transactions do not); a move the backend asked for reads the stored ones.
            moved.appAccountTokenMatched =
                claimed ?? AppAccountToken.matches(binding, customer: payload.to, publisher: publisher)
            // What Apple last said of the subscription's renewal (billing retry, a grace period)
            // moves with it: the new holder keeps the grace the previous one had.
            var evidence = AppleEvidence(facts: Array(facts))
            // A grant made while Apple could not be asked moves with its end, not as Apple's word.
            evidence.provisionalUntil = held.provisional[id]
            if let record = held.subscriptions[id] {
                evidence.renewals[id] = RenewalFact(
                    originalTransactionId: id, autoRenew: record.autoRenew ?? false, autoRenewProductId: record.autoRenewProductId,
                    isInBillingRetry: record.isInBillingRetry ?? (record.status == .billingRetry || record.status == .gracePeriod),
                    gracePeriodExpiresDate: record.gracePeriodExpiresDate, signedDate: record.asOf, billingPlan: record.billingPlan)
            }
            let applied = try await service.apply(
                evidence, publisher: publisher, customer: payload.to, fence: tokens[id], now: now,
                accessFrom: transferredAt, extraEvents: [moved], holding: [id], imported: payload.imported == true,
                importWebhooks: payload.importWebhooks == true, job: job)
            try await service.duringTransfer?(job, .applied)
            try await service.store.setOwner(publisher: publisher.id, originalTransactionId: id, to: payload.to)
            try await job.setMemo("ownerSet", "1")
            try await service.duringTransfer?(job, .ownerChanged)
            try await service.store.addFormerHolder(previous, publisher: publisher.id, originalTransactionId: id)
            try await service.change(publisher: publisher, customer: previous, fence: tokens[id], now: now, job: job) {
                $0.release(originalTransactionId: id, at: transferredAt)
            }
            try await service.duringTransfer?(job, .released)
            return Result(
                publisher: publisher.id, originalTransactionId: id, previousOwner: previous, newOwner: payload.to,
                transferredAt: transferredAt,
                entitlements: applied.state.entitlements(at: now))
        }
    }

    /// A rerun whose notes say its owner change was made, or that finds the owner changed
    /// since it kept whom it moves the purchase from (`from`) and when (`at`, ms). Whatever
    /// moved, neither `from` nor `to` may keep a holding unless it is the owner (or a sharer
    /// by its own document): released as of `at`; `from` is recorded as a former holder when
    /// `to` owns the purchase. What came before the owner change (the new owner's document
    /// first) was made: nothing is applied again, and no policy checked again. An owner other
    /// than `to` means the purchase moved on while this job was stopped (`movedOn`).
    func finish(
        from: String, at: String, owner: String?, payload: JobPayloads.Transfer, publisher: Publisher, fence: TransactionLock.Token?,
        now: Date, job: JobContext
    ) async throws -> Result {
        let id = payload.originalTransactionId
        let transferredAt = Int64(at).map { AppleTimestamp(milliseconds: $0).date } ?? now
        if owner == payload.to {
            try await service.store.addFormerHolder(from, publisher: publisher.id, originalTransactionId: id)
        }
        // Whom this job touched and does not hold the purchase now: `from`, and `to` where the
        // job stopped between applying the purchase to it and the owner change, and another
        // job moved the purchase on meanwhile.
        let holders = try await service.store.holders(publisher: publisher.id, originalTransactionId: id)
        for customer in [from, payload.to] where customer != owner {
            let stale = try await service.store.load(publisher: publisher.id, customer: customer).state
            // A sharer holds it too (the `share` policy), as its own document says: the sharers
            // index alone keeps those who held it by transfer since.
            guard stale.holds(originalTransactionId: id),
                !(holders.contains(customer) && stale.sharedPurchases.contains(id))
            else { continue }
            try await service.change(publisher: publisher, customer: customer, fence: fence, now: now, job: job) {
                $0.release(originalTransactionId: id, at: transferredAt)
            }
        }
        try await service.duringTransfer?(job, .released)
        guard owner == payload.to else {
            throw JobRefusal.notPossible(
                code: "movedOn", "\(id) moved on to another customer while this transfer was stopped; \(from) no longer holds it")
        }
        let target = try await service.store.load(publisher: publisher.id, customer: payload.to).state
        return Result(
            publisher: publisher.id, originalTransactionId: id, previousOwner: from, newOwner: payload.to,
            transferredAt: transferredAt, entitlements: target.entitlements(at: now))
    }
}
