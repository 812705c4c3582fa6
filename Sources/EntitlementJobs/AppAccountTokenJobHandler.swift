import AppStore
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `app-account-token`: calls Set App Account Token for a purchase made outside the app
/// (an offer code, a purchase before sign-in). The environment is the one Entitle knows
/// the purchase from; unknown, production first, then sandbox when production does not know
/// the id (4040005). Apple's refusals (4000183, 4000185, 4000187, 4040005) fail the job with
/// Apple's code; its retryable errors retry it.
package struct AppAccountTokenJobHandler: EntitlementJobHandler {
    let service: EntitlementService

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var publisher: String
        package var originalTransactionId: String
        package var appAccountToken: String
        /// Where Apple took it: `Production` or `Sandbox`.
        package var environment: String
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.AppAccountToken.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        guard let token = UUID(uuidString: payload.appAccountToken)?.uuidString.lowercased() else {
            throw JobRefusal.invalidPayload("appAccountToken must be a UUID")
        }
        let id = payload.originalTransactionId
        guard (1...32).contains(id.count), id.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw JobRefusal.invalidPayload("originalTransactionId must be the App Store's digits")
        }
        let gateway = try service.reader(publisher, bundleId: payload.bundleId).gateway
        guard gateway.hasServerAPI else {
            throw JobRefusal.notPossible(code: "noServerAPI", "app \(gateway.app.bundleId) has no App Store Server API key")
        }
        var environments: [String] = []
        if let holder = try await service.store.holders(publisher: publisher.id, originalTransactionId: id).first {
            let state = try await service.store.load(publisher: publisher.id, customer: holder).state
            if let known = state.transactions.values.first(where: { $0.originalTransactionId == id }) { environments = [known.environment] }
        }
        if environments.isEmpty { environments = ["Production", "Sandbox"].filter { gateway.app.environments.contains($0) } }
        for (index, environment) in environments.enumerated() {
            guard let client = gateway.serverAPI(for: environment) else { continue }
            let failure: AppStoreError
            do {
                try await client.setAppAccountToken(originalTransactionId: id, appAccountToken: token)
                return Result(publisher: publisher.id, originalTransactionId: id, appAccountToken: token, environment: environment)
            } catch {
                failure = error
            }
            if failure.apiErrorCode == AppleErrorCode.originalTransactionIdNotFound, index < environments.count - 1 { continue }
            if failure.isRetryable { throw failure }
            throw JobRefusal.notPossible(
                code: "apple" + (failure.apiErrorCode.map { String($0) } ?? failure.code.rawValue), failure.message)
        }
        throw JobRefusal.notPossible(
            code: "noServerAPI", "app \(gateway.app.bundleId) has no App Store Server API client for \(environments)")
    }
}
