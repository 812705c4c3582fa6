import AppStore
import DurationUnits
import EntitleCore
import Entitlements
import Foundation
import JobQueue
import Logging
import Metrics

/// What every entitlement job shares: the catalog, Apple, the store, the per-transaction
/// locks, and applying verified facts to a customer with the follow-up jobs that change
/// needs (webhooks, renewal checks), enqueued through the customer's outbox.
package struct EntitlementService: Sendable {
    package let configuration: EntitleConfiguration
    package let store: EntitlementStore
    package let locks: TransactionLock
    package let jobQueue: JobQueue
    /// Apple's 429s, kept for the whole publisher.
    package let applePause: ApplePause
    let logger: Logger
    /// Runs after an entitlement write, before its follow-ups are enqueued and the job is
    /// acknowledged: a fault point for crash tests (the CLI sets it in development only).
    package var afterEntitlementWrite: (@Sendable (JobContext) -> Void)?
    /// Runs before a write that claims purchases (`apply(claiming:)`), with their ids: a
    /// fault point for tests of a claim made meanwhile.
    package var beforeClaimingWrite: (@Sendable (JobContext, [String]) async throws -> Void)?
    /// Runs before a job takes its transaction locks (`withLocks`), with their ids: a fault
    /// point for tests of what another job did just before.
    package var beforeTakingLocks: (@Sendable (JobContext, [String]) async throws -> Void)?
    /// Runs at each step of a transfer from its apply on: a fault point for tests of a rerun
    /// that must finish the move.
    package var duringTransfer: (@Sendable (JobContext, TransferJobHandler.Step) async throws -> Void)?
    /// Runs before a job keeps Apple's word on a purchase nobody holds
    /// (`keepForWhoeverClaims`), with its id: a fault point for tests of a claim made meanwhile.
    package var beforeKeeping: (@Sendable (JobContext, String) async throws -> Void)?

    /// Locks whose release failed (Redis unreachable at that moment); each expires with its lease.
    static let lockReleaseFailures = Counter(label: "entitle_lock_release_failures_total")
    /// Follow-up jobs in an outbox whose payload did not decode (a bug: `ChangeEvents` writes them).
    static let unreadableFollowUps = Counter(label: "entitle_unreadable_follow_ups_total")

    package init(configuration: EntitleConfiguration, jobQueue: JobQueue, logger: Logger) {
        self.configuration = configuration
        self.jobQueue = jobQueue
        var store = EntitlementStore(
            redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, format: configuration.customerFormat,
            eventFormat: configuration.eventFormat, logger: logger)
        store.unheldKey = configuration.unheldKey
        self.store = store
        self.locks = TransactionLock(redis: jobQueue.redis, prefix: jobQueue.configuration.prefix)
        self.applePause = ApplePause(store: store)
        self.logger = logger
    }

    func publisher(_ id: String) throws -> Publisher {
        guard let publisher = configuration.catalog.publisher(id) else { throw JobRefusal.unknownPublisher(id) }
        return publisher
    }

    func reader(_ publisher: Publisher, bundleId: String?) throws -> AppleReader {
        let gateways = configuration.gateways[publisher.id] ?? [:]
        let gateway = bundleId.flatMap { gateways[$0] } ?? publisher.apps.lazy.compactMap { gateways[$0.bundleId] }.first
        guard let gateway else {
            throw JobRefusal.notPossible(code: "unknownApp", "publisher \(publisher.id) has no app \(bundleId ?? "")")
        }
        return AppleReader(gateway: gateway, publisher: publisher)
    }

    /// The App Store's time, read at one moment (development's simulator may run ahead of
    /// the wall clock).
    struct AppleMoment: Sendable {
        var now: Date
        /// Writes that go with the locks' release, in its round trip (`apply(closing:)`).
        var closing: ClosingWrites? = nil
        /// What `withLocks(readingForClaim:)` read with the locks; nil when the caller must
        /// read it itself.
        var claimRead: EntitlementStore.ClaimRead? = nil
    }

    /// Runs `body` holding the locks of these original transactions for `job`, with the App
    /// Store's now read once they are held: a decision is never dated before a change
    /// another job made under the same lock (a transfer the job waited for). When another
    /// job holds one, the job is deferred (run again shortly, its attempt given back).
    ///
    /// `readingForClaim`: what the body would read first. On a single server it is read in
    /// the locks' round trip, once they are taken, and is the moment's `claimRead`; elsewhere
    /// (`EntitlementStore.readsWithLocks`) that is nil. The locks are offered to the body's
    /// last write (`apply(lastWriteUnderLocks:)`); those it released are not released again.
    func withLocks<Result: Sendable>(
        publisher: String, originalTransactionIds: some Sequence<String>, job: JobContext,
        readingForClaim request: EntitlementStore.ClaimReadRequest? = nil,
        _ body: ([String: TransactionLock.Token], AppleMoment) async throws -> Result
    ) async throws -> Result {
        var tokens: [String: TransactionLock.Token] = [:]
        let closing = ClosingWrites()
        // The closing writes and the releases in one round trip. A release that fails is not
        // lost (the lease expires on its own, and the fence keeps a late writer out); a
        // closing write that fails fails the job, whose rerun delivers its outbox again.
        func releaseAll() async throws {
            // Released already by the job's last write (`apply(lastWriteUnderLocks:)`).
            let held = closing.released ? [] : tokens.values.sorted { $0.originalTransactionId < $1.originalTransactionId }
            for (token, error) in try await locks.release(held, publisher: publisher, job: job.id, with: closing) {
                Self.lockReleaseFailures.increment()
                job.logger.warning(
                    "a transaction lock was not released; it expires with its lease",
                    metadata: ["originalTransactionId": "\(token.originalTransactionId)", "error": "\(error)"])
            }
        }
        // Sorted, so two jobs wanting the same pair never hold one each forever.
        let ids = Set(originalTransactionIds).sorted()
        if let beforeTakingLocks { try await beforeTakingLocks(job, ids) }
        var claimRead: EntitlementStore.ClaimRead?
        if let request, store.readsWithLocks {
            let taken = try await locks.acquire(ids, publisher: publisher, job: job.id, then: store.claimReads(request))
            tokens = taken.tokens
            if let error = taken.error {
                try? await releaseAll()
                throw error
            }
            if let busy = ids.first(where: { taken.tokens[$0] == nil }) {
                try await releaseAll()
                throw JobFailure.deferred("locked", "another job is working on \(busy)", after: .milliseconds(200))
            }
            do {
                claimRead = try store.claimRead(from: taken.reads, request)
            } catch {
                try? await releaseAll()
                throw error
            }
        } else {
            for id in ids {
                guard let token = try await locks.acquire(publisher: publisher, originalTransactionId: id, job: job.id) else {
                    try await releaseAll()
                    throw JobFailure.deferred("locked", "another job is working on \(id)", after: .milliseconds(200))
                }
                tokens[id] = token
            }
        }
        closing.offer(locks: locks.releaseInWrite(Array(tokens.values), publisher: publisher, job: job.id))
        let result: Result
        do {
            let offset = try await configuration.clock.offset()
            result = try await body(tokens, AppleMoment(now: Date().addingTimeInterval(offset), closing: closing, claimRead: claimRead))
        } catch {
            try? await releaseAll()
            throw error
        }
        try await releaseAll()
        return result
    }

    func changeEvents(_ publisher: Publisher, now: Date) -> ChangeEvents {
        var events = ChangeEvents(
            publisher: publisher, renewalCheckMargin: configuration.renewalCheckMargin,
            billingRetryCheckInterval: configuration.billingRetryCheckInterval, now: now)
        events.provisionalCheckDelay = configuration.provisionalCheckDelay
        return events
    }

    /// Applies verified facts to a customer (oldest first) and enqueues what the change
    /// needs. `extraEvents` join the change's own in the log (a transfer); the purchases in
    /// `sharing` are the customer's through the `share` policy, those in `holding` theirs as
    /// holder from now on. Returns the engine's decision per transaction id, and the customer
    /// as the change left them. Evidence with
    /// `provisionalUntil` was verified here while Apple could not be asked: its purchases
    /// give access until then unless Apple's word comes first. The purchases whose locks
    /// `claiming` names are claimed for the customer in the same write
    /// (`EntitlementStore.update(claiming:)`).
    /// `lastWriteUnderLocks`: the caller writes nothing more under `closing`'s locks after
    /// this, so the write may release them (`EntitlementStore.update(releasing:)`).
    func apply(
        _ evidence: AppleEvidence, publisher: Publisher, customer: String, fence: TransactionLock.Token?, now: Date,
        accessFrom: Date? = nil, extraEvents: [LifecycleEvent] = [], sharing: Set<String> = [],
        holding: Set<String> = [], imported: Bool = false, importWebhooks: Bool = false, snapshot: EntitlementStore.Snapshot? = nil,
        claiming: [TransactionLock.Token] = [], closing: ClosingWrites? = nil, lastWriteUnderLocks: Bool = false, job: JobContext
    ) async throws -> (decisions: [String: EntitlementDecision], state: CustomerEntitlements) {
        let engine = EntitlementEngine(publisher: publisher)
        var events = changeEvents(publisher, now: now)
        events.imported = imported
        events.importWebhooks = importWebhooks
        let facts = evidence.inAppliedOrder
        // Renewal info speaks of a subscription's newest transaction (its billing, its grace).
        let newest = Dictionary(facts.map { ($0.originalTransactionId, $0.transactionId) }) { _, later in later }
        if !claiming.isEmpty, let beforeClaimingWrite { try await beforeClaimingWrite(job, claiming.map(\.originalTransactionId)) }
        let (applied, outbox, _) = try await store.update(
            publisher: publisher.id, customer: customer, fence: fence, snapshot: snapshot, claiming: claiming,
            releasing: lastWriteUnderLocks ? closing : nil,
            { state in
                state.sharedPurchases.formUnion(sharing)
                state.sharedPurchases.subtract(holding)
                var decisions: [String: EntitlementDecision] = [:]
                for fact in facts {
                    let renewal =
                        newest[fact.originalTransactionId] == fact.transactionId ? evidence.renewals[fact.originalTransactionId] : nil
                    decisions[fact.transactionId] = engine.apply(
                        fact, renewal: renewal, to: &state, now: now, accessFrom: accessFrom, provisionalUntil: evidence.provisionalUntil)
                }
                return (decisions, state)
            },
            effects: { before, after, version in try events.changes(before: before, after: after, version: version, extra: extraEvents) })
        try await deliver(outbox, publisher: publisher.id, customer: customer, closing: closing, job: job)
        return applied
    }

    /// Keeps Apple's word on a purchase nobody holds for whoever claims it
    /// (`EntitlementStore.keepUnheld`; `views`: every signed view, not only refunds: a
    /// reversal told before its refund must outrank it). Called under the purchase's lock
    /// (`lock`). Then reads whether the lock's lease ran out meanwhile: a holder means a claim
    /// came; a later token on the lock means another job took it, and may have read before
    /// the keeping and claim after it. Either way the job runs again, to apply Apple's word to
    /// whoever holds the purchase then. Returns whether anything was kept.
    func keepForWhoeverClaims(
        _ facts: [PurchaseFact], publisher: String, lock: TransactionLock.Token?, views: Bool = false, job: JobContext
    ) async throws -> Bool {
        guard let lock else {
            throw JobFailure.permanent("internal", "a purchase this job would keep Apple's word on is not under its lock")
        }
        let id = lock.originalTransactionId
        if let beforeKeeping { try await beforeKeeping(job, id) }
        guard try await store.keepUnheld(facts, publisher: publisher, originalTransactionId: id, views: views, lock: lock) else {
            return false
        }
        let after = try await store.afterKeeping(publisher: publisher, lock: lock)
        if after.held {
            throw JobFailure.deferred("claimedMeanwhile", "\(id) was claimed while Apple's word on it was kept", after: .milliseconds(200))
        }
        if after.lockPassedOn {
            throw JobFailure.deferred(
                "lockPassedOn", "the lock on \(id) passed to a later job while this one kept Apple's word on it", after: .milliseconds(200))
        }
        return true
    }

    /// Gives those who held a purchase before (transferred away) Apple's newer view of its
    /// transactions, a refund or its reversal, so their history stays true; `current`
    /// holders are applied to by the caller.
    func amendFormerHolders(
        _ facts: [PurchaseFact], publisher: Publisher, originalTransactionId: String, current: [String], fence: TransactionLock.Token?,
        moment: AppleMoment, job: JobContext
    ) async throws {
        let engine = EntitlementEngine(publisher: publisher)
        for former in try await store.formerHolders(publisher: publisher.id, originalTransactionId: originalTransactionId)
        where !current.contains(former) {
            try await change(publisher: publisher, customer: former, fence: fence, now: moment.now, job: job) {
                state in
                for fact in facts { engine.amendHistory(with: fact, in: &state) }
            }
        }
    }

    /// Changes a customer's document directly (transfers, refunds of what is stored).
    func change<Result: Sendable>(
        publisher: Publisher, customer: String, fence: TransactionLock.Token?, now: Date,
        job: JobContext, _ body: (inout CustomerEntitlements) throws -> Result
    ) async throws -> Result {
        let events = changeEvents(publisher, now: now)
        let (result, outbox, _) = try await store.update(
            publisher: publisher.id, customer: customer, fence: fence, body,
            effects: { before, after, version in try events.changes(before: before, after: after, version: version) })
        try await deliver(outbox, publisher: publisher.id, customer: customer, job: job)
        return result
    }

    /// Enqueues a customer's outbox (each follow-up once, by its id) and clears it; with
    /// `closing`, the index writes and the clearing go with the locks' release.
    func deliver(
        _ outbox: [FollowUpJob], publisher: String, customer: String, closing: ClosingWrites? = nil, job: JobContext
    ) async throws {
        afterEntitlementWrite?(job)
        guard !outbox.isEmpty else { return }
        // A renewal check goes in the renewal index only, which the sweep reads (App Store
        // time); a delayed job would hold memory for the whole period it waits.
        let requests = outbox.filter { $0.type != .renewalCheck }.map { followUp in
            var request = EnqueueRequest(
                type: followUp.type.rawValue, payload: followUp.payload, queue: job.queue, idempotencyKey: followUp.id)
            request.label = JobPayloads.label(of: followUp.payload)
            return request
        }
        if !requests.isEmpty { _ = try await jobQueue.enqueue(batch: requests) }
        // Renewal checks' payloads were written by `ChangeEvents`; one that does not decode is
        // logged and counted (a bug: the subscription is not checked until its next change),
        // and the outbox is cleared all the same, so it cannot stop this customer's later jobs.
        var checks: [EntitlementStore.DueRenewal] = []
        for followUp in outbox where followUp.type == .renewalCheck {
            guard let due = followUp.dueMs else { continue }
            do {
                let payload = try JobPayloads.decode(JobPayloads.RenewalCheck.self, followUp.payload)
                checks.append(
                    .init(
                        publisher: payload.publisher, originalTransactionId: payload.originalTransactionId, dueMs: due,
                        ifAbsent: followUp.ifAbsent ?? false))
            } catch {
                Self.unreadableFollowUps.increment()
                job.logger.error("a renewal check in the outbox does not decode; not indexed", metadata: ["followUp": "\(followUp.id)"])
            }
        }
        if let closing {
            store.closeDelivery(renewalChecks: checks, outbox: outbox.map(\.id), publisher: publisher, customer: customer, into: closing)
            return
        }
        try await store.scheduleRenewalChecks(checks)
        try await store.clear(outbox: outbox.map(\.id), publisher: publisher, customer: customer)
    }
}
