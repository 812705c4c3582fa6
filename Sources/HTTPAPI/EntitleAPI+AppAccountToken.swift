import EntitleCore
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerAppAccountToken(on routes: RouteTable) {
        // The publisher's backend binds a purchase made outside the app to a customer's
        // appAccountToken at Apple (Set App Account Token): an `app-account-token` job.
        routes.add(.put, "/v1/purchases/{originalTransactionId}/appAccountToken") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let id = try RequestInput.path(context, "originalTransactionId")
            let input = try await RequestInput.json(request, limit: 64 << 10)
            try input.allow(["appAccountToken", "bundleId"])
            let token = try input.required("appAccountToken", maxLength: 64)
            let bundleId = try input.string("bundleId")
            let payload: JobPayloads.AppAccountToken
            do throws(JobRefusal) {
                payload = try .checked(publisher: publisher, originalTransactionId: id, appAccountToken: token, bundleId: bundleId)
            } catch {
                guard case .invalidPayload(let message) = error else { throw APIError.badRequest(error.codeAndMessage.message) }
                throw APIError.badRequest(message)
            }
            let job = try await enqueueOnce(try EnqueueRequest(payload, queue: configuration.queue, uniqueKey: payload.uniqueKey))
            return JSONBody.jobId(job, status: .accepted)
        }
    }
}
