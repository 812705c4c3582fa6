import EntitleCore
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerCredits(on routes: RouteTable) {
        // The publisher's backend tells Entitle its app used credits: a `spend` job, once per reference.
        routes.add(.post, "/v1/customers/{id}/credits/spend") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.path(context, "id")
            try RequestInput.checkCustomer(customer, for: publisher)
            let input = try await RequestInput.json(request, limit: 64 << 10)
            try input.allow(["amount", "reference"])
            let amount = try input.integer(
                "amount", in: 1...1_000_000_000, message: "amount must be a whole number of credits, 1 to 1000000000")
            let reference = try input.required("reference", maxLength: 128)
            let payload = JobPayloads.Spend(publisher: publisher.id, customer: customer, amount: amount, reference: reference)
            // The same reference is the same use: its job, not a second spend.
            let result = try await enqueue(
                try EnqueueRequest(
                    payload, queue: configuration.queue,
                    idempotencyKey: "spend:\(publisher.id):\(Self.digest(customer + "\n" + reference))"))
            return JSONBody.jobId(result.id, status: .accepted)
        }
    }
}
