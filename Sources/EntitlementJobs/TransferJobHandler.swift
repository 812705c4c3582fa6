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
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Transfer.self, job.payload)
        guard !payload.to.isEmpty, payload.to.utf8.count <= 256 else { throw JobRefusal.invalidPayload("to must be 1 to 256 bytes") }
        let publisher = try service.publisher(payload.publisher)
        guard publisher.transferPolicy != .keep else {
            throw JobRefusal.notPossible(code: "transferRefused", "publisher \(publisher.id) keeps purchases with their first owner")
        }
        let id = payload.originalTransactionId
        return try await service.withLocks(publisher: publisher.id, originalTransactionIds: [id], job: job) { tokens, moment in
            let now = moment.now
            let owner = try await service.store.owner(publisher: publisher.id, originalTransactionId: id)
            var rerun: (from: String, at: String)?
            if owner == payload.to {
                // After a crash between the owner change and the release, the owner is already
                // the new one. Only this job's own rerun (it kept its moment of transfer, below)
                // finishes the move, releasing whom it moved the purchase from (its memo; the
                // request's `from` for a job kept before the memo was). Where another job moved
                // the purchase there first (a request made again, two claims of one customer), a
                // second move would only write a second transfer and date the holding again.
                guard let at = try await job.memo("transferredAt", legacyField: "transferredAt") else {
                    throw JobRefusal.notPossible(code: "alreadyHeld", "\(payload.to) already holds \(id)")
                }
                guard let from = try await job.memo("transferFrom") ?? payload.from else {
                    throw JobRefusal.notPossible(code: "notHeld", "no customer of \(publisher.id) holds \(id)")
                }
                rerun = (from, at)
            }
            guard let previous = rerun?.from ?? owner else {
                throw JobRefusal.notPossible(code: "notHeld", "no customer of \(publisher.id) holds \(id)")
            }
            guard previous != payload.to else {
                throw JobRefusal.notPossible(code: "alreadyHeld", "\(payload.to) already holds \(id)")
            }
            let held = try await service.store.load(publisher: publisher.id, customer: previous).state
            if let rerun, !held.holds(originalTransactionId: id) {
                // Released already: this job's run before ended after the release, or another
                // job finished the move this one began. Nothing is left to do, nor written again.
                let target = try await service.store.load(publisher: publisher.id, customer: payload.to).state
                let transferredAt = Int64(rerun.at).map { AppleTimestamp(milliseconds: $0).date } ?? now
                return Result(
                    publisher: publisher.id, originalTransactionId: id, previousOwner: previous, newOwner: payload.to,
                    transferredAt: transferredAt, entitlements: target.entitlements(at: now))
            }
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
            // The moment of transfer is kept from the first run (in the job's record), so a
            // rerun after a crash changes nothing, however often the purchase went back and forth.
            let kept = try await job.memo(
                "transferredAt", keepingFirst: String(AppleTimestamp(now).milliseconds), legacyField: "transferredAt")
            let transferredAt = Int64(kept).map { AppleTimestamp(milliseconds: $0).date } ?? now
            // Whom it is moved from, kept for a rerun after the owner change: the owner read now,
            // whoever an earlier run that did not get that far read.
            if rerun == nil { try await job.setMemo("transferFrom", previous) }

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
            let decisions = try await service.apply(
                evidence, publisher: publisher, customer: payload.to, fence: tokens[id], now: now,
                accessFrom: transferredAt, extraEvents: [moved], holding: [id], job: job)
            try await service.store.setOwner(publisher: publisher.id, originalTransactionId: id, to: payload.to)
            try await service.duringTransfer?(job, .ownerChanged)
            try await service.store.addFormerHolder(previous, publisher: publisher.id, originalTransactionId: id)
            try await service.change(publisher: publisher, customer: previous, fence: tokens[id], now: now, job: job) {
                $0.release(originalTransactionId: id, at: transferredAt)
            }
            try await service.duringTransfer?(job, .released)
            return Result(
                publisher: publisher.id, originalTransactionId: id, previousOwner: previous, newOwner: payload.to,
                transferredAt: transferredAt,
                entitlements: decisions.values.first?.entitlements ?? [])
        }
    }
}
