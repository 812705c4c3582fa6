import EntitleCore
import Entitlements
import Foundation
import Hummingbird

/// A customer's lifecycle events, newest first: the publisher's backend reads them with its
/// secret key (`GET /v1/customers/{id}/events`), operators from the dashboard
/// (`GET /v1/admin/publishers/{publisherId}/customers/{id}/events`).
struct EventsController {
    let api: EntitleAPI

    /// One page: the events, and the cursor for the next (older) page when there is one.
    struct Page: Encodable {
        var events: [EventDocument]
        var next: String?
    }

    /// An event as the API shows it: the logged event with ISO 8601 dates.
    struct EventDocument: Encodable {
        let event: LifecycleEvent

        func encode(to encoder: any Encoder) throws {
            try event.encode(to: encoder)
        }
    }

    func addRoutes(to routes: RouteTable) {
        routes.add(.get, "/v1/customers/{id}/events") { request, context in
            let publisher = try api.secretKeyPublisher(request, context)
            let customer = publisher.canonicalCustomerId(try RequestInput.path(context, "id"))
            return try await page(publisher: publisher.id, customer: customer, request)
        }
        routes.add(.get, "/v1/admin/publishers/{publisherId}/customers/{id}/events") { request, context in
            try api.requireAdmin(request, context)
            let publisher = try RequestInput.path(context, "publisherId")
            guard let catalogEntry = api.settings.catalog.publisher(publisher) else { throw APIError.notFound("no publisher \(publisher)") }
            return try await page(
                publisher: publisher, customer: catalogEntry.canonicalCustomerId(try RequestInput.path(context, "id")), request)
        }
    }

    func page(publisher: String, customer: String, _ request: Request) async throws -> Response {
        let parameters = request.uri.queryParameters
        let limit: Int
        if let text = parameters.get("limit") {
            guard let value = Int(text), (1...200).contains(value) else { throw APIError.badRequest("limit must be 1 to 200") }
            limit = value
        } else {
            limit = 50
        }
        let before = parameters.get("before")
        if let before, !EventLog.isStreamId(before) {
            throw APIError.badRequest("before must be the next of an earlier page (such as 1795578621988-0)")
        }
        guard try await api.store.load(publisher: publisher, customer: customer).version > 0 else {
            throw APIError.notFound("no customer \(customer)")
        }
        let (events, next) = try await api.store.log.customerEvents(publisher: publisher, customer: customer, before: before, limit: limit)
        return try JSONBody.response(
            encoding: Page(events: events.map { EventDocument(event: $0.event) }, next: next), dates: .iso8601)
    }
}
