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
            return try JSONBody.response(
                encoding: CleengAccessItem(
                    customerEmail: customer, offerId: offer.offerId, accessGranted: access.granted,
                    expiresAt: access.granted ? access.expiresAt : nil))
        }

        routes.add(.get, "/cleeng/entitlements/{customerEmail}") { request, context in
            let publisher = try cleengPublisher(request, context)
            let customer = try cleengCustomer(context, publisher: publisher)
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            let items = CustomerDocument.offers(state, at: at).map { item in
                CleengAccessItem(offerId: item.offerId, accessGranted: item.granted, expiresAt: item.expiresAt)
            }
            return try JSONBody.response(encoding: CleengEntitlementsReply(customerEmail: customer, items: items))
        }

        routes.add(.get, "/cleeng/accessible-tags/{customerEmail}") { request, context in
            let publisher = try cleengPublisher(request, context)
            let customer = try cleengCustomer(context, publisher: publisher)
            let at = try await dateParameter(request, "at")
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            return try JSONBody.response(encoding: CleengTagsReply(customerEmail: customer, tags: state.entitlements(at: at)))
        }
    }

    /// The customer a Cleeng read call names, checked as `customerEmail` is on `/apple/payment`.
    func cleengCustomer(_ context: APIRequestContext, publisher: Publisher) throws -> String {
        try RequestInput.checkCustomer(try RequestInput.path(context, "customerEmail"), for: publisher, field: "customerEmail")
    }

}
