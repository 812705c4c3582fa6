import ArgumentParser
import EntitleCore
import Entitlements
import Foundation
import HTTPAPI
import JobQueue

/// `entitle push --publisher P --bundle-id B (--entitlement E | --offer O | --customer C...)
/// --payload JSON`: queues a push as `POST /v1/pushes` does, checked the same way.
struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Push to customers' devices through APNs; prints the push's id.",
        discussion: """
            The audience is the customers entitled to --entitlement or --offer when each batch is sent, or the customers \
            named by --customer. --payload is the APNs payload (a JSON object: an alert, or aps.content-available 1 for a \
            background push). With --wait, waits for the push to finish and prints its summary (JSON).
            """)

    @OptionGroup var options: RedisOptions

    @Option(help: "The publisher id.")
    var publisher: String

    @Option(help: "The app's bundle id.")
    var bundleId: String

    @Option(help: "Customers entitled to this entitlement.")
    var entitlement: String?

    @Option(help: "Customers holding this offer.")
    var offer: String?

    @Option(help: "A customer (repeat for several).")
    var customer: [String] = []

    @Option(help: "The APNs payload, a JSON object.")
    var payload: String

    @Option(help: "alert (default), background or voip.")
    var pushType: String?

    @Option(help: "10, 5 or 1 (default: 10; 5 for background pushes).")
    var priority: Int?

    @Option(help: "UNIX seconds until which APNs keeps trying (0: once).")
    var expiration: Int?

    @Option(help: "apns-collapse-id (at most 64 bytes).")
    var collapseId: String?

    @Flag(help: "A marketing push: only devices whose customer opted in get it.")
    var promotional = false

    @Option(help: "The same key sends one push, however often the command runs.")
    var idempotencyKey: String?

    @Option(help: "Wait up to this many seconds for the push to finish and print its summary.")
    var wait: Double?

    @OptionGroup var target: CatalogOptions

    func run() async throws {
        if let wait, !(0...3600).contains(wait) { throw ValidationError("--wait must be 0 to 3600 seconds") }
        let found = try WorkerCommand.publisher(publisher, catalog: target.catalog, why: "the push is checked against it")
        var audience: [String: Any] = [:]
        if let entitlement { audience["entitlement"] = entitlement }
        if let offer { audience["offerId"] = offer }
        if customer.count == 1 { audience["customer"] = customer[0] }
        if customer.count > 1 { audience["customers"] = customer }
        guard audience.count == 1 else { throw ValidationError("give one of --entitlement, --offer or --customer") }
        guard let payloadObject = try? JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any] else {
            throw ValidationError("--payload must be a JSON object")
        }
        var body: [String: Any] = ["bundleId": bundleId, "audience": audience, "payload": payloadObject, "promotional": promotional]
        if let pushType { body["pushType"] = pushType }
        if let priority { body["priority"] = priority }
        if let expiration { body["expiration"] = expiration }
        if let collapseId { body["collapseId"] = collapseId }
        let request: PushRequest
        do {
            request = try EntitleAPI.pushRequest(json: Array(try JSONSerialization.data(withJSONObject: body)), publisher: found)
        } catch let error as APIError {
            throw CommandFailure(error.message)
        }
        guard found.push != nil else { throw CommandFailure("publisher \(publisher) has no push settings (catalog: push)") }
        let logger = options.makeLogger("entitle.push")
        let jobQueue = try options.makeJobQueue(logger: logger, connections: 1)
        defer { jobQueue.redis.close() }
        let pushes = EntitlementStore(redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, logger: logger).pushes
        guard
            let id = try await pushes.submit(
                request, publisher: publisher, idempotencyKey: idempotencyKey, jobQueue: jobQueue, queue: target.queue)
        else { throw CommandFailure("--idempotency-key \(idempotencyKey ?? "") was used for another push") }
        guard let wait else {
            print(id)
            return
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(wait * 1000))
        while true {
            guard let record = try await pushes.record(publisher: publisher, id: id) else { throw CommandFailure("push \(id) is gone") }
            if record.status == "finished" || record.status == "failed" {
                var counts: [String: Int] = [:]
                for (result, count) in record.counts where count != 0 { counts[result.rawValue] = count }
                var summary: [String: Any] = [
                    "pushId": id, "status": record.status, "audience": record.audienceSize ?? 0, "lapsed": record.lapsed, "counts": counts,
                ]
                if let error = record.error { summary["error"] = error }
                print(String(decoding: try JSONSerialization.data(withJSONObject: summary, options: .sortedKeys), as: UTF8.self))
                if record.status == "failed" { throw CommandFailure("push \(id) failed: \(record.error ?? "")") }
                return
            }
            guard ContinuousClock.now < deadline else { throw CommandFailure("push \(id) has not finished; status \(record.status)") }
            try await Task.sleep(for: .milliseconds(200))
        }
    }
}
