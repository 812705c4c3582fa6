import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `Jobs/job-hash.schema.json` is true of the stored hash, and `Jobs/job.schema.json` of what
/// the built `entitle jobs show --json` prints, for real jobs in every status a job can have.
@Suite struct JobSchemaTests {
    static let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    /// Reads a job both ways, checks both against their schemas, and notes what it saw.
    final class Inspector {
        let harness: QueueHarness
        let hashSchema, shownSchema: JSONSchemaChecker
        let url: String
        var hashFields: Set<String> = []
        var shownFields: Set<String> = []
        var statuses: Set<String> = []

        init(_ harness: QueueHarness) async throws {
            self.harness = harness
            hashSchema = try JSONSchemaChecker(contentsOf: JobsFolderTests.jobsFolder.appendingPathComponent("job-hash.schema.json"))
            shownSchema = try JSONSchemaChecker(contentsOf: JobsFolderTests.jobsFolder.appendingPathComponent("job.schema.json"))
            url = try await TestRedis.url()
        }

        /// Checks the job as it is now; the caller makes sure it stays so meanwhile.
        func inspect(_ what: String, _ id: String, status: JobStatus) async throws {
            let hash = try await harness.redis.send(["HGETALL", harness.keys.job(id)]).fieldValues
            // A queued job of the third format has no status field until it starts.
            #expect((hash["status"] ?? JobStatus.queued.rawValue) == status.rawValue, "\(what): \(hash)")
            #expect(hashSchema.problems(hash) == [], "\(what): \(hash)")
            hashFields.formUnion(hash.keys)
            statuses.insert(hash["status"] ?? JobStatus.queued.rawValue)
            for extra in [["--payload"], []] {
                let arguments =
                    ["jobs", "show", id, "--queue", harness.name, "--json", "--redis", url, "--prefix", harness.queue.configuration.prefix]
                    + extra
                let shown = try await ChildProcess.run(ChildProcess.entitleExecutable, arguments)
                #expect(shown.status == 0, "\(what): \(shown.errors)")
                #expect(shownSchema.problems(json: shown.output) == [], "\(what): \(shown.output)")
                let document = try JSONSerialization.jsonObject(with: Data(shown.output.utf8)) as? [String: Any] ?? [:]
                #expect(document["status"] as? String == status.rawValue, "\(what)")
                shownFields.formUnion(document.keys)
            }
        }
    }

    @Test func everyStatusIsTrueOfBothSchemas() async throws {
        let h = try await QueueHarness("schema")
        let inspector = try await Inspector(h)
        let holding = Box(true)
        var registry = JobHandlerRegistry.builtIn()
        registry.register(
            "hold",
            JobRegistration(
                handler: ClosureHandler { _ in
                    while holding.current { try await Task.sleep(for: .milliseconds(10)) }
                    return nil
                }))
        registry.register(
            "later", JobRegistration(handler: ClosureHandler { _ in throw JobFailure.retryable("notYet", "later", after: .seconds(3600)) }))
        registry.register(
            "wait", JobRegistration(handler: ClosureHandler { _ in throw JobFailure.deferred("busy", "held", after: .seconds(3600)) }))
        registry.register("broken", JobRegistration(handler: ClosureHandler { _ in throw JobFailure.permanent("broken", "never") }))
        // A result long enough for the fourth format to pack it, in pieces.
        let longResult = #"{"entitlements":[\#((0..<60).map { #""e\#($0)""# }.joined(separator: ","))]}"#
        registry.register("long", JobRegistration(handler: ClosureHandler { _ in longResult }))
        registry.register(
            "noted",
            JobRegistration(
                handler: ClosureHandler { job in
                    try await job.setMemo("step", "1")
                    return #"{"noted":true}"#
                }))

        // Before any worker: queued with everything a producer can give, waited for; scheduled;
        // and one whose lost workers already spent its only attempt.
        var full = h.request(payload: #"{"sleepMs":1}"#, idempotencyKey: "order-1", maxAttempts: 3)
        full.label = #"{"publisher":"demo"}"#
        full.traceparent = Self.traceparent
        full.uniqueKey = "purchase-1"
        let fullID = try await h.queue.enqueue(full).id
        #expect(try await h.redis.run(QueueScripts.watch, keys: [h.keys.job(fullID)], arguments: []).string == "queued")
        try await inspector.inspect("queued, waited for", fullID, status: .queued)
        let scheduledID = try await h.queue.enqueue(h.request(delay: .seconds(3600))).id
        try await inspector.inspect("scheduled", scheduledID, status: .scheduled)
        let lostID = try await h.queue.enqueue(h.request(maxAttempts: 1)).id
        try await h.redis.send(["HSET", h.keys.job(lostID), "attempt", "1"])

        let worker = h.worker(registry: registry, shutdownTimeout: .milliseconds(200))
        let (heldID, brokenID) = try await h.whileRunning(worker) {
            let lost = try await h.waitForStatus(lostID, .failed)
            #expect(lost.lastError == "out of attempts: its workers were lost")
            try await inspector.inspect("out of attempts", lostID, status: .failed)
            _ = try await h.waitForStatus(fullID, .succeeded)
            try await inspector.inspect("succeeded, waited for", fullID, status: .succeeded)
            let holdID = try await h.enqueue("hold")
            _ = try await h.waitForStatus(holdID, .processing)
            try await inspector.inspect("processing", holdID, status: .processing)
            let laterID = try await h.enqueue("later")
            _ = try await h.waitForStatus(laterID, .retrying)
            try await inspector.inspect("retrying", laterID, status: .retrying)
            let waitID = try await h.enqueue("wait")
            try await eventually("the deferral") { try await h.job(waitID)?.retryAt != nil }
            try await inspector.inspect("deferred", waitID, status: .queued)
            let notedID = try await h.enqueue("noted")
            _ = try await h.waitForStatus(notedID, .succeeded)
            try await inspector.inspect("succeeded with a memo", notedID, status: .succeeded)
            let longID = try await h.enqueue("long")
            #expect(try await h.waitForStatus(longID, .succeeded).result == longResult)
            try await inspector.inspect("succeeded with a packed result", longID, status: .succeeded)
            // No handler for the type: retried like any failure, here with one attempt only.
            let unknownID = try await h.enqueue("mystery", maxAttempts: 1)
            let unknown = try await h.waitForStatus(unknownID, .failed)
            #expect(unknown.lastError?.hasPrefix("unknownJobType:") == true)
            try await inspector.inspect("unknown type", unknownID, status: .failed)
            let deadID = try await h.enqueue("broken")
            _ = try await h.waitForStatus(deadID, .failed)
            try await inspector.inspect("failed", deadID, status: .failed)
            return (holdID, deadID)
        }
        // The job still held at shutdown was given back; the dead one goes back by hand.
        try await inspector.inspect("given back at shutdown", heldID, status: .queued)
        #expect(try await h.queue.retryDead(queue: h.name, ids: [brokenID]) == 1)
        try await inspector.inspect("retried from the dead set", brokenID, status: .queued)
        holding.update { $0 = false }

        // Every status, and every field either schema lists, was seen (legacy notes aside).
        #expect(inspector.statuses == Set(JobStatus.allCases.map(\.rawValue)))
        // Legacy notes, and the fields only the first format writes (HashFormatTests runs those).
        let hashProperties = try Self.properties("job-hash.schema.json").subtracting(["transfer", "transferredAt", "id", "queue"])
        let pieces = inspector.hashFields.filter { $0.hasPrefix("result") && $0 != "result" }
        #expect(inspector.hashFields.subtracting(pieces).subtracting(["memo:step"]) == hashProperties)
        #expect(inspector.hashFields.contains("memo:step") && pieces.contains("result2"))
        #expect(inspector.shownFields == (try Self.properties("job.schema.json")))
    }

    static func properties(_ schema: String) throws -> Set<String> {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: JobsFolderTests.jobsFolder.appendingPathComponent(schema)))
        return Set(((object as? [String: Any])?["properties"] as? [String: Any] ?? [:]).keys)
    }
}
