import EntitleCore
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerResync(on routes: RouteTable) {
        // The publisher's backend (its support desk) asks Entitle to rebuild a customer's
        // purchases from Apple: a `resync` job, one at a time per customer.
        routes.add(.post, "/v1/customers/{id}/resync") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.checkCustomer(try RequestInput.path(context, "id"), for: publisher)
            guard try await store.load(publisher: publisher.id, customer: customer).version > 0 else {
                throw APIError.notFound("\(publisher.id) has no customer \(customer)")
            }
            let payload = JobPayloads.Resync(publisher: publisher.id, customer: customer)
            let job = try await enqueueOnce(
                try EnqueueRequest(payload, queue: configuration.queue, uniqueKey: payload.uniqueKey), conflictIsError: false)
            return JSONBody.jobId(job, status: .accepted)
        }
    }
}
