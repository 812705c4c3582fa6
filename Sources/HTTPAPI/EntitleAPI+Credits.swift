import EntitleCore
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerCredits(on routes: RouteTable) {
        // The publisher's backend tells Entitle its app used credits: a `spend` job, once per reference.
        routes.add(.post, "/v1/customers/{id}/credits/spend") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.checkCustomer(try RequestInput.path(context, "id"), for: publisher)
            let input = try await RequestInput.json(request, limit: 64 << 10)
            try input.allow(["amount", "reference"])
            let amount = try input.integer(
                "amount", in: 1...1_000_000_000, message: "amount must be a whole number of credits, 1 to 1000000000")
            let reference = try input.required("reference", maxLength: 128)
            let payload = JobPayloads.Spend(publisher: publisher.id, customer: customer, amount: amount, reference: reference)
            // A reference names one use: the same request again is its job, not a second spend;
            // another amount under it is a conflict, whether its key is still kept (24 h) or
            // only the ledger remembers it.
            let conflict = "reference \(reference) names an earlier spend of another amount; a reference names one use"
            let (state, _) = try await store.load(publisher: publisher.id, customer: customer)
            if let earlier = state.credits.spend(reference: reference), -earlier.amount != amount {
                throw APIError(.conflict, "referenceConflict", "\(conflict) (\(-earlier.amount) credits); nothing was spent")
            }
            var request = try EnqueueRequest(
                payload, queue: configuration.queue, idempotencyKey: "spend:\(publisher.id):\(Self.digest(customer + "\n" + reference))")
            request.repeatMustMatch = true
            let result = try await enqueue(request)
            guard result.outcome != .mismatch else {
                var error = APIError(.conflict, "referenceConflict", "\(conflict) (job \(result.id)); nothing was spent")
                error.headers[.location] = "/v1/jobs/\(result.id)"
                throw error
            }
            return JSONBody.jobId(result.id, status: .accepted)
        }
    }
}
