import ArgumentParser
import EntitleCore
import Entitlements
import Foundation
import JobQueue

extension CustomersCommand {
    /// `entitle customers resync CUSTOMER --publisher P`: the operator's road to the `resync`
    /// job (the API's is `POST /v1/customers/{id}/resync`).
    struct Resync: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rebuild a customer's purchases from Apple's transaction history and statuses; prints the job's id.",
            discussion: """
                Queues a resync job: a worker asks Apple (Get Transaction History, Get All Subscription Statuses) about every \
                purchase the customer holds and applies what it says; what Entitle knew already changes nothing, and only \
                the missing lifecycle events are logged. One resync of a customer runs at a time: while one runs, this \
                prints its id. Follow it with `entitle jobs show ID`.
                """)

        @OptionGroup var options: RedisOptions

        @Argument(help: "The customer id.")
        var customer: String

        @Option(help: "The publisher id.")
        var publisher: String

        @OptionGroup var target: CatalogOptions

        func run() async throws {
            guard !customer.isEmpty, customer.utf8.count <= 256, !customer.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw ValidationError("CUSTOMER must have 1 to 256 bytes and no control characters")
            }
            let publisher = try WorkerCommand.publisher(self.publisher, catalog: target.catalog, why: "the publisher is checked against it")
            let customer = publisher.canonicalCustomerId(self.customer)
            let logger = options.makeLogger("entitle.customers")
            let jobQueue = try options.makeJobQueue(logger: logger, connections: 1)
            defer { jobQueue.redis.close() }
            let store = EntitlementStore(redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, logger: logger)
            guard try await store.load(publisher: publisher.id, customer: customer).version > 0 else {
                throw CommandFailure("\(publisher.id) has no customer \(customer)")
            }
            let payload = JobPayloads.Resync(publisher: publisher.id, customer: customer)
            let result = try await jobQueue.enqueue(try EnqueueRequest(payload, queue: target.queue, uniqueKey: payload.uniqueKey))
            if result.outcome == .conflict {
                FileHandle.standardError.write(Data("a resync of \(customer) is under way: job \(result.id)\n".utf8))
            }
            print(result.id)
        }
    }
}
