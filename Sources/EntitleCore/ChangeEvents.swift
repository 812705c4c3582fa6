import AppStore
import DurationUnits
import Entitlements
import Foundation
import RedisClient
import Reporting

/// What a change to a customer means for the outside world: the lifecycle events the log
/// keeps, the report pieces it moves, the webhooks the publisher is told by, and the renewal
/// checks the subscriptions now need. Derived from the document before and after, so the same
/// change always yields the same ids.
package struct ChangeEvents: Sendable {
    package let publisher: Publisher
    package let renewalCheckMargin: Duration
    package let billingRetryCheckInterval: Duration
    package let now: Date
    /// How soon Apple is asked again about a purchase granted provisionally.
    package var provisionalCheckDelay: Duration = .seconds(60)
    /// A change an import made: its events are marked `imported`, and posted to the webhook
    /// only when the import asked for it (a historic purchase is not news to the publisher).
    package var imported = false
    package var importWebhooks = false

    package init(
        publisher: Publisher, renewalCheckMargin: Duration, billingRetryCheckInterval: Duration, now: Date
    ) {
        self.publisher = publisher
        self.renewalCheckMargin = renewalCheckMargin
        self.billingRetryCheckInterval = billingRetryCheckInterval
        self.now = now
    }

    /// What a change writes besides the customer (`EntitlementStore.Change`): its lifecycle
    /// events (derived from the document before and after, plus `extra` ones the caller knows
    /// of, a transfer), each carrying the version the change makes; the change of the
    /// customer's report pieces; a webhook per event the publisher takes; and renewal checks.
    package func changes(
        before: CustomerEntitlements, after: CustomerEntitlements, version: Int, extra: [LifecycleEvent] = []
    ) throws -> EntitlementStore.Change {
        var events = LifecycleEvents(publisher: publisher, now: now).derive(before: before, after: after) + extra
        for index in events.indices {
            events[index].customerVersion = version
            if imported { events[index].imported = true }
        }
        let entitlements = after.entitlements(at: now)
        let posted = !imported || importWebhooks
        let webhooks = try events.filter { posted && (publisher.webhook?.posts($0.type) ?? false) }.map {
            try webhook($0, entitlements: entitlements)
        }
        let delta = ReportDelta.between(
            ReportTimeline.pieces(of: before, publisher: publisher), ReportTimeline.pieces(of: after, publisher: publisher))
        return EntitlementStore.Change(
            events: events, delta: delta, followUps: webhooks + (try renewalChecks(before: before, after: after)),
            retention: .seconds(Int64(publisher.eventRetentionDays) * 86_400))
    }

    /// The body a receiver gets: the event (dates in ISO 8601), the customer's entitlements as
    /// of its version, `event` (the lifecycle type) and `type` (by the webhook's `typeNames`).
    package static func webhookBody(_ event: LifecycleEvent, entitlements: [String], names: Publisher.Webhook.TypeNames) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        encoder.dateEncodingStrategy = .iso8601
        guard var body = try JSONSerialization.jsonObject(with: try encoder.encode(event)) as? [String: Any] else {
            throw EntitlementStoreError(.unreadable, "an event did not encode as an object")
        }
        body["event"] = event.type.rawValue
        body["entitlements"] = entitlements
        if names == .legacy, let legacy = legacyName(of: event) {
            body["type"] = legacy
            // Receivers of the `credit` event read a signed amount: negative when credits went.
            if event.type == .creditsSpent || event.type == .creditsClawedBack, let amount = event.amount { body["amount"] = -amount }
        }
        return String(decoding: try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]), as: UTF8.self)
    }

    /// The name receivers built for the seven earlier types know an event by: a billing issue
    /// without a grace period is the `expiration` they got when access stopped.
    package static func legacyName(of event: LifecycleEvent) -> String? {
        if event.type == .billingIssue, event.gracePeriodExpiresDate == nil { return "expiration" }
        return event.type.legacyName
    }

    /// The webhook job for an event.
    package func webhook(_ event: LifecycleEvent, entitlements: [String]) throws -> FollowUpJob {
        let body = try Self.webhookBody(event, entitlements: entitlements, names: publisher.webhook?.typeNames ?? .legacy)
        return try FollowUpJob(
            id: "webhook:\(event.id)", JobPayloads.Webhook(publisher: publisher.id, event: body, eventId: event.id))
    }

    /// The next check of each subscription whose state changed and that may still renew: one
    /// per subscription (the renewal index holds one due date each), the earliest; the check
    /// puts the next one in the index when it runs.
    func renewalChecks(before: CustomerEntitlements, after: CustomerEntitlements) throws -> [FollowUpJob] {
        var due: [String: Date] = [:]
        // Still in billing retry: a check already due (or running, which puts the next one)
        // stands; a date from now would put it off at every change.
        var ifAbsent: Set<String> = []
        for (id, subscription) in after.subscriptions where before.subscriptions[id] != subscription {
            if let date = dueDate(subscription) { due[id] = date }
            if subscription.status == .billingRetry, before.subscriptions[id]?.status == .billingRetry { ifAbsent.insert(id) }
        }
        // A purchase granted while Apple could not be asked: Apple is asked again soon (and
        // the check retries with back-off while it stays unreachable).
        for (id, until) in after.provisional where before.provisional[id] != until {
            due[id] = min(due[id] ?? .distantFuture, now.addingTimeInterval(provisionalCheckDelay.seconds))
            ifAbsent.remove(id)
        }
        return try due.sorted(by: { $0.key < $1.key }).map {
            var check = try renewalCheck(originalTransactionId: $0.key, due: $0.value)
            if ifAbsent.contains($0.key) { check.ifAbsent = true }
            return check
        }
    }

    /// Apple retries a failed renewal for up to 60 days.
    static let longestBillingRetry: TimeInterval = 60 * 86_400

    /// When Apple should next be asked about a subscription (App Store time); `nil` when it
    /// cannot renew any more.
    package func dueDate(_ subscription: SubscriptionRecord) -> Date? {
        switch subscription.status {
        case .active:
            return subscription.expiresDate.map { $0.addingTimeInterval(renewalCheckMargin.seconds) }
        case .gracePeriod:
            return (subscription.gracePeriodExpiresDate ?? subscription.expiresDate).map {
                $0.addingTimeInterval(renewalCheckMargin.seconds)
            }
        case .billingRetry:
            return now.addingTimeInterval(billingRetryCheckInterval.seconds)
        case .expired where !LifecycleEvents.endedForGood(subscription):
            // Past its expiry with auto-renew on and no word from Apple: asked again until
            // Apple says (it renewed, retries billing, or ended, which logs the `expiration`),
            // for as long as Apple could still be retrying billing.
            guard let expires = subscription.expiresDate, now < expires.addingTimeInterval(Self.longestBillingRetry) else {
                return nil
            }
            return now.addingTimeInterval(billingRetryCheckInterval.seconds)
        case .expired, .revoked:
            return nil
        }
    }

    package func renewalCheck(originalTransactionId: String, due: Date) throws -> FollowUpJob {
        let check = JobPayloads.RenewalCheck(publisher: publisher.id, originalTransactionId: originalTransactionId)
        return try FollowUpJob(id: check.key(dueMs: AppleTimestamp(due).milliseconds), check, due: due)
    }
}
