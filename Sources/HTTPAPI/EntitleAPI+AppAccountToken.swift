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
            guard (1...32).contains(id.count), id.allSatisfy(\.isASCIIDigit) else {
                throw APIError.badRequest("originalTransactionId must be the App Store's digits")
            }
            let input = try await RequestInput.json(request, limit: 64 << 10)
            try input.allow(["appAccountToken", "bundleId"])
            guard let token = UUID(uuidString: try input.required("appAccountToken", maxLength: 64)) else {
                throw APIError.badRequest("appAccountToken must be a UUID")
            }
            let bundleId = try input.string("bundleId")
            if let bundleId, publisher.app(bundleId: bundleId) == nil {
                throw APIError.badRequest("publisher \(publisher.id) has no app \(bundleId)")
            }
            let payload = JobPayloads.AppAccountToken(
                publisher: publisher.id, originalTransactionId: id, appAccountToken: token.uuidString.lowercased(), bundleId: bundleId)
            let job = try await enqueueOnce(
                try EnqueueRequest(payload, queue: configuration.queue, uniqueKey: "token:\(publisher.id):\(id)"))
            return JSONBody.jobId(job, status: .accepted)
        }
    }
}
