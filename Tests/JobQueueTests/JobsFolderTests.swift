import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// `Jobs/` is what producers in other languages read: it must match the Swift side.
@Suite struct JobsFolderTests {
    static let jobsFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Jobs")

    func read(_ name: String) throws -> Data { try Data(contentsOf: Self.jobsFolder.appendingPathComponent(name)) }

    @Test func theExampleDecodesAsAJobRecordAndIsAValidRequest() throws {
        let job = try JSONDecoder().decode(JobRecord.self, from: try read("examples/noop.json"))
        #expect(job.type == "noop")
        #expect(job.status == .queued)
        try EnqueueRequest(
            type: job.type, payload: job.payload, queue: job.queue, idempotencyKey: job.idempotencyKey, maxAttempts: job.maxAttempts,
            id: job.id
        ).validate()
        // The finished receipt example too, with a result that is JSON.
        let receipt = try JSONDecoder().decode(JobRecord.self, from: try read("examples/receipt.json"))
        #expect(receipt.type == "receipt" && receipt.status == .succeeded)
        try EnqueueRequest(type: receipt.type, payload: receipt.payload, queue: receipt.queue, id: receipt.id).validate()
        #expect(try JSONSerialization.jsonObject(with: Data((receipt.result ?? "").utf8)) is [String: Any])
    }

    @Test func theSchemaDescribesExactlyTheSwiftEnvelope() throws {
        let schema = try #require(try JSONSerialization.jsonObject(with: try read("job.schema.json")) as? [String: Any])
        let properties = Set((schema["properties"] as? [String: Any] ?? [:]).keys)
        let required = Set(schema["required"] as? [String] ?? [])
        // Every field set: the encoder names every property JobRecord has.
        let full = JobRecord(
            id: "a", type: "t", queue: "q", payload: "{}", status: .failed, attempt: 1, maxAttempts: 2, idempotencyKey: "k",
            createdAt: 1, enqueuedAt: 2, startedAt: 3, finishedAt: 4, retryAt: 5, lastError: "e", result: "null", label: "l",
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        )
        let encoded = try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(full)) as? [String: Any])
        #expect(Set(encoded.keys) == properties)
        // Required: what a record without the optional fields still has.
        let minimal = JobRecord(id: "a", type: "t", queue: "q", payload: "{}", status: .queued, createdAt: 1, enqueuedAt: 1)
        let minimalKeys = try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(minimal)) as? [String: Any]).keys
        #expect(Set(minimalKeys) == required)
        let statuses = ((schema["properties"] as? [String: Any])?["status"] as? [String: Any])?["enum"] as? [String]
        #expect(statuses.map(Set.init) == Set(JobStatus.allCases.map(\.rawValue)))
        // The example is valid against the schema's required set.
        let example = try #require(try JSONSerialization.jsonObject(with: try read("examples/noop.json")) as? [String: Any])
        #expect(required.isSubset(of: example.keys) && Set(example.keys).isSubset(of: properties))
    }

    @Test func theShippedScriptIsTheOneTheProducerRunsByteForByte() throws {
        // Bytes, not trimmed text: a trailing newline would give the file another SHA than EVALSHA's.
        #expect(try read("enqueue.lua") == Data(QueueScripts.enqueue.source.utf8))
    }

    @Test func theShippedWatchScriptIsTheOneTheAPIRunsByteForByte() throws {
        #expect(try read("watch.lua") == Data(QueueScripts.watch.source.utf8))
    }

    @Test func theReadmeRecipeEnqueuesAJobTheWorkerSideReads() async throws {
        // Exactly the KEYS and ARGV that Jobs/README.md gives, by plain EVAL.
        let prefix = TestRedis.uniquePrefix("wire")
        let redis = RedisConnection(configuration: try await TestRedis.configuration(), logger: TestRedis.logger)
        let source = String(decoding: try read("enqueue.lua"), as: UTF8.self)
        let example = try JSONDecoder().decode(JobRecord.self, from: try read("examples/noop.json"))
        let q = example.queue
        let keys = [
            "\(prefix):{\(q)}:pending", "\(prefix):{\(q)}:scheduled", "\(prefix):{\(q)}:stats", "\(prefix):{\(q)}:recent",
            "\(prefix):{\(q)}:job:\(example.id)", "\(prefix):{\(q)}:idem:\(example.idempotencyKey ?? "")",
            "\(prefix):{\(q)}:job:\(example.id)", "\(prefix):{\(q)}:job:\(example.id)",
        ]
        let arguments = [
            String(example.createdAt), "86400000", q, "200", example.id, example.type, example.payload,
            String(example.maxAttempts), "0", example.idempotencyKey ?? "", "", "", "",
        ]
        let reply = try await redis.send(["EVAL", source, String(keys.count)] + keys + arguments)
        #expect(reply.array == [.bulk(Array(example.id.utf8)), .integer(1)])
        try await redis.send(["SADD", "\(prefix):queues", q])

        let queue = JobQueue(
            redis: try await TestRedis.pool(), configuration: JobQueueConfiguration(prefix: prefix), logger: TestRedis.logger)
        let stored = try #require(try await queue.job(id: example.id))
        #expect(stored == example)
        // The same idempotency key through the Swift producer finds the same job.
        let again = try await queue.enqueue(EnqueueRequest(type: "noop", queue: q, idempotencyKey: example.idempotencyKey))
        #expect(again == EnqueueResult(id: example.id, created: false))
    }
}
