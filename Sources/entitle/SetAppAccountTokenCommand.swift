import ArgumentParser
import EntitleCore
import Entitlements
import Foundation
import JobQueue

extension CustomersCommand {
    /// `entitle customers set-app-account-token ORIGINAL_TRANSACTION_ID --token UUID --publisher P`:
    /// the operator's road to Set App Account Token (the API's is
    /// `PUT /v1/purchases/{originalTransactionId}/appAccountToken`), checked the same way and
    /// queued as the same `app-account-token` job, one per purchase at a time.
    struct SetAppAccountToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-app-account-token",
            abstract: "Bind a purchase made outside the app to a customer's appAccountToken at Apple; prints the job's id.",
            discussion: """
                Queues an app-account-token job (a worker calls Apple's Set App Account Token, so the purchase's later \
                transactions and notifications carry the token). The publisher and app are checked against the catalog; \
                follow the job with `entitle jobs show ID`.
                """)

        @OptionGroup var options: RedisOptions

        @Argument(help: "The purchase's original transaction id (the App Store's digits).")
        var originalTransactionId: String

        @Option(help: "The customer's appAccountToken (a UUID).")
        var token: String

        @Option(help: "The publisher id.")
        var publisher: String

        @Option(name: .customLong("bundle-id"), help: "Which app, when the publisher has several.")
        var bundleId: String?

        @OptionGroup var target: CatalogOptions

        func run() async throws {
            let publisher = try WorkerCommand.publisher(
                self.publisher, catalog: target.catalog, why: "the publisher and its app are checked against it")
            let payload: JobPayloads.AppAccountToken
            do throws(JobRefusal) {
                payload = try .checked(
                    publisher: publisher, originalTransactionId: originalTransactionId, appAccountToken: token, bundleId: bundleId)
            } catch {
                guard case .invalidPayload(let message) = error else { throw CommandFailure(error.codeAndMessage.message) }
                throw ValidationError(message)
            }
            let logger = options.makeLogger("entitle.customers")
            let jobQueue = try options.makeJobQueue(logger: logger, connections: 1)
            defer { jobQueue.redis.close() }
            let request = try EnqueueRequest(payload, queue: target.queue, uniqueKey: payload.uniqueKey)
            let result = try await jobQueue.enqueue(request)
            // The same request again names the job in flight; another token must wait for it.
            if result.outcome == .conflict, try await jobQueue.job(id: result.id, queue: target.queue)?.payload != request.payload {
                throw CommandFailure(
                    "job \(result.id) for this purchase has not finished; follow it with `entitle jobs show \(result.id)` and retry")
            }
            print(result.id)
        }
    }
}
