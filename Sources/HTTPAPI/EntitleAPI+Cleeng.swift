import EntitleCore
import Entitlements
import Foundation
import Hummingbird

extension EntitleAPI {
    /// Cleeng's read calls, for backends built against Cleeng: its `getAccessStatus` (Get
    /// Entitlement) per offer, Get Entitlements, and `getAccessibleTags` (a customer's tags are
    /// the entitlements their offers grant). Same credentials as `POST /apple/payment`
    /// (`X-Publisher-Token` and Basic) and the same errors: 400 bad input, 401 credentials,
    /// 422 an unknown offer, 500 with a message. `expiresAt` is in UNIX seconds, as Cleeng's.
    func registerCleeng(on routes: RouteTable) {
        routes.add(.get, "/cleeng/entitlements/{customerEmail}/{offerId}") { request, context in
            let publisher = try cleengPublisher(request, context)
            let customer = try cleengCustomer(context, publisher: publisher)
            let offerId = try RequestInput.path(context, "offerId")
            guard let offer = publisher.offer(offerId) else {
                throw APIError.unprocessable("unknownOffer", "publisher \(publisher.id) has no offer \(offerId)")
            }
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            let access = CustomerDocument.access(state, offer: offer, at: at)
            return try JSONBody.response([
                "customerEmail": customer, "offerId": offer.offerId, "accessGranted": access.granted,
                "grantType": access.granted ? "purchase" : NSNull(), "expiresAt": Self.unixSeconds(access.granted ? access.expiresAt : nil),
            ])
        }

        routes.add(.get, "/cleeng/entitlements/{customerEmail}") { request, context in
            let publisher = try cleengPublisher(request, context)
            let customer = try cleengCustomer(context, publisher: publisher)
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            let items = CustomerDocument.offers(state, at: at).map { item -> [String: Any] in
                [
                    "offerId": item.offerId, "accessGranted": item.granted, "grantType": item.granted ? "purchase" : NSNull(),
                    "expiresAt": Self.unixSeconds(item.expiresAt),
                ]
            }
            return try JSONBody.response(["customerEmail": customer, "items": items])
        }

        routes.add(.get, "/cleeng/accessible-tags/{customerEmail}") { request, context in
            let publisher = try cleengPublisher(request, context)
            let customer = try cleengCustomer(context, publisher: publisher)
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            return try JSONBody.response(["customerEmail": customer, "tags": state.entitlements(at: at)])
        }
    }

    /// The customer a Cleeng read call names, checked as `customerEmail` is on `/apple/payment`.
    func cleengCustomer(_ context: APIRequestContext, publisher: Publisher) throws -> String {
        let customer = try RequestInput.path(context, "customerEmail")
        try RequestInput.checkCustomer(customer, for: publisher, field: "customerEmail")
        return customer
    }

    /// UNIX seconds (Cleeng's `expiresAt`); `null` for never.
    static func unixSeconds(_ date: Date?) -> Any {
        guard let date, date.timeIntervalSince1970.isFinite, abs(date.timeIntervalSince1970) < 1e12 else { return NSNull() }
        return Int64(date.timeIntervalSince1970.rounded(.down))
    }
}
