import Entitlements
import Foundation
import Hummingbird
import JobQueue
import Worker

extension EntitleAPI {
    func registerReading(on routes: RouteTable) {
        routes.add(.get, "/v1/jobs/{id}") { request, context in
            let publisher = try publisher(request)
            let id = try RequestInput.path(context, "id")
            let wait = try waitParameter(request)
            let record = try await (wait > .zero ? waitForJob(id, timeout: wait) : jobQueue.job(id: id, queue: configuration.queue))
            // Another publisher's job is as absent as one that never was.
            guard let record, Self.publisher(of: record) == publisher.id else {
                throw APIError.notFound("no job \(id) (never enqueued, or its record expired)")
            }
            var document = record.document()
            document["idempotencyKey"] = nil
            return JSONBody.response(document)
        }

        routes.add(.get, "/v1/customers/{id}/entitlements") { request, context in
            let publisher = try publisher(request)
            let customer = try RequestInput.path(context, "id")
            let at = try await dateParameter(request, "at")
            let (state, version) = try await store.load(publisher: publisher.id, customer: customer)
            guard version > 0 else { throw APIError.notFound("no customer \(customer)") }
            return JSONBody.response(CustomerDocument.object(state, at: at))
        }

        // Cleeng-style: may this customer use this offer now?
        routes.add(.get, "/v1/customers/{id}/access/{offerId}") { request, context in
            let publisher = try publisher(request)
            let customer = try RequestInput.path(context, "id")
            let offerId = try RequestInput.path(context, "offerId")
            guard let offer = publisher.offer(offerId) else { throw APIError.notFound("publisher \(publisher.id) has no offer \(offerId)") }
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            let access = CustomerDocument.access(state, offer: offer, at: at)
            return JSONBody.response([
                "customer": customer, "offerId": offer.offerId, "accessGranted": access.granted,
                "expiresAt": access.expiresAt.map { $0.formatted(.iso8601) as Any } ?? NSNull(),
            ])
        }
    }

    /// The publisher a job's payload names (every entitlement job has one).
    static func publisher(of record: JobRecord) -> String? {
        (try? JSONSerialization.jsonObject(with: Data(record.payload.utf8)) as? [String: Any])?["publisher"] as? String
    }

    /// `?wait=N` seconds, at most the configured maximum.
    func waitParameter(_ request: Request) throws -> Duration {
        guard let text = request.uri.queryParameters.get("wait") else { return .zero }
        let limit = Double(configuration.maxWait.components.seconds)
        guard let seconds = Double(text), seconds >= 0, seconds <= limit else {
            throw APIError.badRequest("wait must be a number of seconds from 0 to \(Self.format(limit))")
        }
        return .milliseconds(Int64(seconds * 1000))
    }

    /// An ISO 8601 time or milliseconds since the epoch; absent, the App Store's now.
    func dateParameter(_ request: Request, _ name: String) async throws -> Date {
        guard let text = request.uri.queryParameters.get(name) else { return try await now() }
        if let date = try? Date(text, strategy: .iso8601) { return date }
        if let milliseconds = Int64(text) { return Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
        throw APIError.badRequest("\(name) must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or milliseconds since 1970")
    }
}
