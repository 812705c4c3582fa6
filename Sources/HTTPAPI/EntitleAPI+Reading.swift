import DurationUnits
import EntitleCore
import Entitlements
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerReading(on routes: RouteTable) {
        routes.add(.get, "/v1/jobs/{id}") { request, context in
            let caller = try caller(request, context)
            let id = try RequestInput.path(context, "id")
            let wait = try waitParameter(request)
            // Whose job it is, checked before any wait: another caller's job is as absent as one
            // that never was, and answers at once (a wait would tell that it exists).
            guard let found = try await jobQueue.job(id: id, queue: configuration.queue), try Self.mayRead(found, caller) else {
                throw APIError.notFound("no job \(id) (never enqueued, or its record expired)")
            }
            let record = wait > .zero && !found.status.isFinished ? try await waitForJob(id, timeout: wait) ?? found : found
            var document = record.document()
            document.idempotencyKey = nil
            return try JSONBody.response(encoding: document)
        }

        routes.add(.get, "/v1/customers/{id}/entitlements") { request, context in
            let caller = try caller(request, context)
            let (publisher, customer) = try requireCustomerAccess(caller, customer: try RequestInput.path(context, "id"))
            let at = try await dateParameter(request, "at")
            let (state, version) = try await store.load(publisher: publisher.id, customer: customer)
            guard version > 0 else { throw APIError.notFound("no customer \(customer)") }
            return try JSONBody.response(encoding: CustomerDocument(state, at: at))
        }

        // Cleeng-style: may this customer use this offer now?
        routes.add(.get, "/v1/customers/{id}/access/{offerId}") { request, context in
            let caller = try caller(request, context)
            let (publisher, customer) = try requireCustomerAccess(caller, customer: try RequestInput.path(context, "id"))
            let offerId = try RequestInput.path(context, "offerId")
            guard let offer = publisher.offer(offerId) else { throw APIError.notFound("publisher \(publisher.id) has no offer \(offerId)") }
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            let access = CustomerDocument.access(state, offer: offer, at: at)
            return try JSONBody.response(
                encoding: OfferAccessReply(
                    customer: customer, offerId: offer.offerId, accessGranted: access.granted,
                    expiresAt: access.expiresAt.map { $0.formatted(.iso8601) }))
        }
    }

    /// Whether `caller` may read a job: a secret key, its publisher's jobs; an app key, the
    /// jobs it created for the customer its token names; the admin token, none here (the
    /// admin routes show jobs).
    static func mayRead(_ record: JobRecord, _ caller: Caller) throws -> Bool {
        // Who a job is for, as entitlement jobs' payloads say (their labels, once a job that
        // succeeded has dropped its payload).
        let owner = JobPayloads.owner(label: record.label, payload: record.payload)
        switch caller {
        case .secretKey(let publisher): return owner?.publisher == publisher.id
        case .app(let publisher, let key, let customer):
            guard let customer else {
                throw APIError(.unauthorized, "customerTokenRequired", "an app key reads its jobs with its customer's X-Customer-Token")
            }
            return owner?.publisher == publisher.id && owner?.appKey == key.id && owner?.customer == customer
        case .admin: throw APIError(.forbidden, "forbidden", "operators read jobs at /v1/admin/queues/{queue}/recent and /dead")
        }
    }

    /// `?wait=N` seconds, at most the configured maximum; `default` when absent.
    func waitParameter(_ request: Request, default fallback: Duration = .zero) throws -> Duration {
        guard let text = request.uri.queryParameters.get("wait") else { return fallback }
        let limit = Double(configuration.maxWait.components.seconds)
        guard let seconds = Double(text), seconds >= 0, seconds <= limit else {
            throw APIError.badRequest("wait must be a number of seconds from 0 to \(Self.format(limit))")
        }
        return .milliseconds(Int64(seconds * 1000))
    }

    /// An ISO 8601 time or milliseconds since the epoch, from 1970 to the end of year 9999;
    /// absent, the App Store's now.
    func dateParameter(_ request: Request, _ name: String) async throws -> Date {
        guard let text = request.uri.queryParameters.get(name) else { return try await now() }
        let date: Date? =
            if text.utf8.count > 40 { nil } else if let date = try? Date(text, strategy: .iso8601) { date } else {
                Int64(text).map { Date(timeIntervalSince1970: Double($0) / 1000) }
            }
        guard let date, Self.datesAnswered.contains(date) else {
            throw APIError.badRequest(
                "\(name) must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or milliseconds since 1970, between 1970 and 9999")
        }
        return date
    }

    /// The dates a question may be about: 1970-01-01 to 9999-12-31 (UTC).
    static let datesAnswered = Date(timeIntervalSince1970: 0)...Date(timeIntervalSince1970: 253_402_300_799.999)
}
