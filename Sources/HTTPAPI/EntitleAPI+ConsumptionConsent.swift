import EntitleCore
import Foundation
import Hummingbird

extension EntitleAPI {
    /// A customer's consent to sharing consumption information with Apple (Apple asks for it
    /// when the customer requests a refund; Entitle answers only with consent). Publishers
    /// whose `consumption.consent` is `perCustomer` record each customer's answer here.
    struct ConsumptionConsent: Codable {
        var customer: String
        /// Nil when no answer was recorded (no consent).
        var consented: Bool?
    }

    func registerConsumptionConsent(on routes: RouteTable) {
        routes.add(.put, "/v1/customers/{id}/consumption-consent") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.checkCustomer(try RequestInput.path(context, "id"), for: publisher)
            let input = try await RequestInput.json(request, limit: 4 << 10)
            try input.allow(["consented"])
            guard case .bool(let consented)? = input.values["consented"] else {
                throw APIError.badRequest("consented must be true or false")
            }
            try await store.setConsumptionConsent(consented, publisher: publisher.id, customer: customer)
            return try JSONBody.response(encoding: ConsumptionConsent(customer: customer, consented: consented))
        }
        routes.add(.get, "/v1/customers/{id}/consumption-consent") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.checkCustomer(try RequestInput.path(context, "id"), for: publisher)
            let consented = try await store.consumptionConsent(publisher: publisher.id, customer: customer)
            return try JSONBody.response(encoding: ConsumptionConsent(customer: customer, consented: consented))
        }
    }
}
