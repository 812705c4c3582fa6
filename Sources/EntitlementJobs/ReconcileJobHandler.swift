import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `reconcile`: Apple retries a V2 notification five times over about a week, then gives
/// up, and advises reconciling with Get Notification History. For each of the publisher's
/// apps with an App Store Server API key, in each environment it sells in, this pages
/// through the history from where the last reconcile ended (an hour of overlap; Apple keeps
/// 180 days, 30 in the sandbox) and queues every notification not already applied as the
/// notification route would (the same job id, `notification:UUID`: one arriving meanwhile is
/// the same job). Each page is verified (Apple's signature) and its position saved, so a job
/// killed midway resumes with the same request and token; nothing is applied twice (the
/// notification's applied marker and its job's id).
package struct ReconcileJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    /// Reconciling again from a little before where the last one ended: a notification Apple
    /// dates just before the end may be recorded in its history a moment later.
    static let overlap: TimeInterval = 3600
    /// Where a publisher's first reconcile starts, unless told.
    static let firstWindow: TimeInterval = 7 * 86_400
    /// Jobs listed in the result, at most.
    static let listedJobs = 1000

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package struct Stretch: Sendable, Hashable, Codable {
            package var bundleId: String
            package var environment: String
            package var from: Date
            package var to: Date
            package var pages = 0
            /// Notifications in Apple's history for the stretch.
            package var seen = 0
            package var alreadyApplied = 0
            package var queued = 0
            /// Not applied yet, but its job exists already: queued or running (the route got it
            /// meanwhile), or dead (`entitle dead retry` sends it again).
            package var alreadyQueued = 0
            /// Entries whose signature did not verify (not queued).
            package var invalid = 0
        }

        package var publisher: String
        package var stretches: [Stretch]
        /// The `notification` jobs queued (the first 1000).
        package var notificationJobIds: [String]
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.Reconcile.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        let now = try await service.configuration.clock.now()
        if let since = payload.since, let until = payload.until, since >= until {
            throw JobRefusal.invalidPayload("since must be before until")
        }
        var result = Result(publisher: publisher.id, stretches: [], notificationJobIds: [])
        let gateways = service.configuration.gateways[publisher.id] ?? [:]
        // Apple refusing one app or environment (a wrong key) does not keep the others from
        // being reconciled; the job fails at the end, naming each refusal.
        var refusals: [(code: String, message: String)] = []
        for app in publisher.apps {
            guard let gateway = gateways[app.bundleId] else { continue }
            for environment in ["Production", "Sandbox"] where app.environments.contains(environment) {
                guard let client = environment == "Production" ? gateway.production : gateway.sandbox else { continue }
                do {
                    let (stretch, jobIds) = try await reconcile(
                        gateway: gateway, client: client, environment: environment, publisher: publisher, payload: payload, now: now,
                        job: job)
                    result.stretches.append(stretch)
                    result.notificationJobIds += jobIds.prefix(Self.listedJobs - result.notificationJobIds.count)
                } catch let refusal as JobRefusal {
                    let (code, message) = refusal.codeAndMessage
                    refusals.append((code, "\(app.bundleId) \(environment): \(message)"))
                }
            }
        }
        if let first = refusals.first {
            throw JobRefusal.notPossible(code: first.code, refusals.map(\.message).joined(separator: "; "))
        }
        guard !result.stretches.isEmpty else {
            throw JobRefusal.notPossible(code: "noServerAPI", "publisher \(publisher.id) has no app with an App Store Server API key")
        }
        return result
    }

    func reconcile(
        gateway: AppleGateway, client: AppStoreServerAPIClient, environment: String, publisher: Publisher,
        payload: JobPayloads.Reconcile, now: Date, job: JobContext
    ) async throws -> (Result.Stretch, [String]) {
        let bundleId = gateway.app.bundleId
        let store = service.store
        var cursor = try await store.reconcileCursor(publisher: publisher.id, bundleId: bundleId, environment: environment)
        // Apple takes a start within 180 days (30 in the sandbox); a minute's margin for clocks.
        let oldest = now.addingTimeInterval(-Double(environment == "Sandbox" ? 30 : 180) * 86_400 + 60)
        let start: Date
        let end: Date
        // A window the operator named (since, until) neither resumes nor leaves a position to
        // resume: the schedule's own stays as it was; it moves `through` only when it joins on.
        let named = payload.since != nil || payload.until != nil
        if !named, let resumed = cursor.start, let stop = cursor.end, cursor.token != nil {
            // A reconcile under way (this job before a crash, or another): go on where it stopped.
            (start, end) = (max(resumed, oldest), stop)
        } else {
            let from =
                payload.since ?? cursor.through.map { $0.addingTimeInterval(-Self.overlap) } ?? now.addingTimeInterval(-Self.firstWindow)
            // A minute past now: Apple takes a future end as now, and a notification sent at
            // this very moment is inside the window.
            let latest = now.addingTimeInterval(60)
            (start, end) = (max(from, oldest), min(payload.until ?? latest, latest))
            cursor.token = nil
        }
        var stretch = Result.Stretch(bundleId: bundleId, environment: environment, from: start, to: end)
        var jobIds: [String] = []
        guard start < end else { return (stretch, jobIds) }
        let request = NotificationHistoryRequest(startDate: AppleTimestamp(start), endDate: AppleTimestamp(end))
        var token = cursor.token
        var restarted = false
        while true {
            let page: NotificationHistoryResponse
            do {
                page = try await client.getNotificationHistory(request, paginationToken: token)
            } catch {
                let code = error.apiErrorCode
                if token != nil, !restarted, code == 4_000_017 || code == 4_000_014 {
                    // The saved token expired (or is no longer Apple's): the window again from
                    // its start (what was queued already is found applied or in flight).
                    (token, restarted) = (nil, true)
                    continue
                }
                if error.isRetryable { throw error }
                throw JobRefusal.notPossible(code: "apple" + (code.map { String($0) } ?? error.code.rawValue), error.message)
            }
            stretch.pages += 1
            for item in page.notificationHistory ?? [] {
                guard let signed = item.signedPayload else { continue }
                stretch.seen += 1
                guard let uuid = try await Self.notificationUUID(signed, gateway: gateway, job: job) else {
                    stretch.invalid += 1
                    continue
                }
                if try await store.wasApplied(publisher: publisher.id, notification: uuid) {
                    stretch.alreadyApplied += 1
                    continue
                }
                let queued = try await service.jobQueue.enqueue(
                    try EnqueueRequest(
                        JobPayloads.Notification(publisher: publisher.id, signedPayload: signed), queue: job.queue,
                        id: JobPayloads.Notification.jobId(uuid)))
                guard queued.created else {
                    stretch.alreadyQueued += 1
                    continue
                }
                stretch.queued += 1
                if jobIds.count < Self.listedJobs { jobIds.append(queued.id) }
            }
            token = page.hasMore == true ? page.paginationToken : nil
            if named {
                guard token == nil else { continue }
                var latest = try await store.reconcileCursor(publisher: publisher.id, bundleId: bundleId, environment: environment)
                if latest.through.map({ start <= $0 }) ?? true {
                    latest.through = max(latest.through ?? end, end)
                    try await store.saveReconcileCursor(latest, publisher: publisher.id, bundleId: bundleId, environment: environment)
                }
                return (stretch, jobIds)
            }
            // Where to go on from, saved after the page's notifications are queued (queued
            // again after a crash: the same keys, the same jobs).
            cursor.start = start
            cursor.end = end
            cursor.token = token
            if token == nil { cursor.through = max(cursor.through ?? end, end) }
            if token == nil { (cursor.start, cursor.end) = (nil, nil) }
            try await store.saveReconcileCursor(cursor, publisher: publisher.id, bundleId: bundleId, environment: environment)
            if token == nil { return (stretch, jobIds) }
        }
    }

    /// The notification's UUID once Apple's signature on it verifies; nil when it does not.
    static func notificationUUID(_ signed: String, gateway: AppleGateway, job: JobContext) async throws -> String? {
        let payload: NotificationPayload
        do {
            payload = try await gateway.signedData.verifyNotification(signed)
        } catch {
            if error.isRetryable { throw error }
            job.logger.warning("a notification in Apple's history did not verify", metadata: ["error": "\(error.message)"])
            return nil
        }
        guard let id = payload.notificationUUID, !id.isEmpty, id.utf8.count <= 64 else { return nil }
        return id
    }
}
