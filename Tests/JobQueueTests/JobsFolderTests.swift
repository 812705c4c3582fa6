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

    func json(_ name: String) throws -> Any { try JSONSerialization.jsonObject(with: try read(name)) }

    func schema(_ name: String) throws -> JSONSchemaChecker {
        try JSONSchemaChecker(contentsOf: Self.jobsFolder.appendingPathComponent(name))
    }

    /// The job `examples/noop.json` is the stored hash of (Jobs/README.md says so).
    static let exampleJob = (queue: "default", id: "0d9f6c1e2b3a4f5e8d7c6b5a49382716")

    /// `examples/noop.json` is a stored hash (HGETALL, every value a string);
    /// `examples/receipt.json` is what `entitle jobs show --json` prints for a finished job.
    @Test func theExamplesAreTrueOfTheirSchemasAndTheSwiftTypes() throws {
        let hash = try #require(try json("examples/noop.json") as? [String: String])
        #expect(try schema("job-hash.schema.json").problems(hash) == [])
        let job = try #require(JobRecord(fields: hash, id: Self.exampleJob.id, queue: Self.exampleJob.queue))
        #expect(job.type == "noop")
        #expect(job.status == .queued)
        try EnqueueRequest(
            type: job.type, payload: job.payload, queue: job.queue, idempotencyKey: job.idempotencyKey, maxAttempts: job.maxAttempts,
            id: job.id
        ).validate()

        let shown = try json("examples/receipt.json")
        #expect(try schema("job.schema.json").problems(shown) == [])
        let receipt = try #require(shown as? [String: Any])
        #expect(receipt["type"] as? String == "receipt" && receipt["status"] as? String == "succeeded")
        #expect(receipt["result"] is [String: Any])
    }

    /// The printed form's fields are exactly `JobDocument`'s; both schemas' statuses are `JobStatus`'s.
    @Test func theSchemasDescribeTheSwiftTypes() throws {
        let shownSchema = try #require(try json("job.schema.json") as? [String: Any])
        let properties = Set((shownSchema["properties"] as? [String: Any] ?? [:]).keys)
        let required = Set(shownSchema["required"] as? [String] ?? [])
        // Every field set: the document names every property it can have.
        let full = JobRecord(
            id: "a", type: "t", queue: "q", payload: "{}", status: .failed, attempt: 1, maxAttempts: 2, idempotencyKey: "k",
            createdAt: 1, enqueuedAt: 2, startedAt: 3, finishedAt: 4, retryAt: 5, lastError: "e", result: "null", label: "l",
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ).document(includingPayload: true)
        let encoded = try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(full)) as? [String: Any])
        #expect(Set(encoded.keys) == properties)
        // Required: what a document without the optional fields still has.
        let minimal = JobRecord(id: "a", type: "t", queue: "q", payload: "", status: .queued, createdAt: 1, enqueuedAt: 1)
            .document(includingPayload: true)
        let minimalKeys = try #require(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(minimal)) as? [String: Any]).keys
        #expect(Set(minimalKeys) == required)
        for name in ["job.schema.json", "job-hash.schema.json"] {
            let schema = try #require(try json(name) as? [String: Any])
            let statuses = ((schema["properties"] as? [String: Any])?["status"] as? [String: Any])?["enum"] as? [String]
            #expect(statuses.map(Set.init) == Set(JobStatus.allCases.map(\.rawValue)), "\(name)")
        }
    }

    @Test func theShippedScriptIsTheOneTheProducerRunsByteForByte() throws {
        // Bytes, not trimmed text: a trailing newline would give the file another SHA than EVALSHA's.
        #expect(try read("enqueue.lua") == Data(QueueScripts.enqueue.source.utf8))
    }

    @Test func theShippedWatchScriptIsTheOneTheAPIRunsByteForByte() throws {
        #expect(try read("watch.lua") == Data(QueueScripts.watch.source.utf8))
    }

    // MARK: The README keeps up with the code

    static let sources = jobsFolder.deletingLastPathComponent().appendingPathComponent("Sources").appendingPathComponent("JobQueue")

    func readme() throws -> String { String(decoding: try read("README.md"), as: UTF8.self) }

    func source(_ name: String) throws -> String { try String(contentsOf: Self.sources.appendingPathComponent(name), encoding: .utf8) }

    /// The first capture group of each match of `pattern`.
    func captures(_ pattern: String, in text: String) throws -> [String] {
        try NSRegularExpression(pattern: pattern).matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        }
    }

    /// Every key `QueueKeys` builds (read from its source, so a new one counts), and the queue
    /// history's, is in the README's table of keys.
    @Test func theReadmeNamesEveryKeyOfAQueue() throws {
        let readme = try readme()
        let suffixes = try captures(#"base \+ "([a-z]+:?)""#, in: try source("QueueKeys.swift"))
        #expect(suffixes.count >= 12, "\(suffixes)")
        for suffix in suffixes { #expect(readme.contains("`PREFIX:{Q}:\(suffix)"), "\(suffix)") }
        #expect(readme.contains("`\(QueueKeys.registry(prefix: "PREFIX"))`"))
        let history = try captures(#"\\\(jobQueue\.configuration\.prefix\):(\{metrics\}:[a-z]+)"#, in: try source("QueueHistory.swift"))
        #expect(history.count == 2, "\(history)")
        for key in history { #expect(readme.contains("`PREFIX:\(key)`"), "\(key)") }
    }

    /// Every counter a queue script increments (read from the scripts) is in the README.
    @Test func theReadmeNamesEveryCounterTheScriptsWrite() throws {
        let readme = try readme()
        let scripts = try source("QueueScripts.swift")
        let perType = Set(try captures(#"'([a-z]+):' \.\."#, in: scripts) + captures(#"counter = '([a-z]+):'"#, in: scripts))
        let plain = Set(try captures(#"'HINCRBY', KEYS\[[0-9]+\], '([a-z]+)'"#, in: scripts))
        #expect(perType.isSuperset(of: ["enqueued", "succeeded", "retried", "deferred", "dead"]), "\(perType)")
        #expect(plain.isSuperset(of: ["reaped", "runs", "applied"]), "\(plain)")
        for name in perType { #expect(readme.contains("`\(name):TYPE`"), "\(name)") }
        for name in plain { #expect(readme.contains("`\(name)`"), "\(name)") }
    }

    /// Every status, every field of the stored hash, the noop job's payload options and the
    /// unknown type's error code are in the README.
    @Test func theReadmeNamesEveryStatusFieldAndOption() throws {
        let readme = try readme()
        for status in JobStatus.allCases { #expect(readme.contains("`\(status.rawValue)`"), "\(status)") }
        let hashSchema = try #require(try json("job-hash.schema.json") as? [String: Any])
        let fields = (hashSchema["properties"] as? [String: Any] ?? [:]).keys
        #expect(fields.count >= 20)
        for field in fields { #expect(readme.contains("`\(field)`"), "\(field)") }
        #expect(readme.contains("`memo:NAME`"))
        let noop = try source("NoopHandler.swift")
        // The fields of NoopHandler.Payload: from `struct Payload` to its closing brace.
        let start = try #require(noop.range(of: "struct Payload"))
        let end = try #require(noop[start.upperBound...].range(of: "}"))
        let options = try captures(#"var ([A-Za-z]+):"#, in: String(noop[start.upperBound..<end.lowerBound]))
        #expect(options.count == 3, "\(options)")
        for option in options { #expect(readme.contains("\"\(option)\""), "\(option)") }
        let unknown = try captures(#"retryable\("([A-Za-z]+)", "this worker has no handler"#, in: try source("QueueConsumer.swift"))
        #expect(unknown.count == 1 && readme.contains("`\(unknown.first ?? "?"): this worker has no handler"))
    }

    @Test func theReadmeRecipeEnqueuesAJobTheWorkerSideReads() async throws {
        // Exactly the KEYS and ARGV that Jobs/README.md gives, by plain EVAL.
        let prefix = TestRedis.uniquePrefix("wire")
        let redis = RedisConnection(configuration: try await TestRedis.configuration(), logger: TestRedis.logger)
        let source = String(decoding: try read("enqueue.lua"), as: UTF8.self)
        let example = try #require(try json("examples/noop.json") as? [String: String])
        let (q, id, idempotencyKey) = (Self.exampleJob.queue, Self.exampleJob.id, example["idempotencyKey"] ?? "")
        let keys = [
            "\(prefix):{\(q)}:pending", "\(prefix):{\(q)}:scheduled", "\(prefix):{\(q)}:stats", "\(prefix):{\(q)}:recent",
            "\(prefix):{\(q)}:job:\(id)", "\(prefix):{\(q)}:idem:\(idempotencyKey)", "\(prefix):{\(q)}:job:\(id)",
            "\(prefix):{\(q)}:job:\(id)",
        ]
        let arguments = [
            example["createdAt"] ?? "", "86400000", q, "200", id, example["type"] ?? "", example["payload"] ?? "",
            example["maxAttempts"] ?? "", "0", idempotencyKey, "", "", "",
        ]
        let reply = try await redis.send(["EVAL", source, String(keys.count)] + keys + arguments)
        #expect(reply.array == [.bulk(Array(id.utf8)), .integer(1)])
        try await redis.send(["SADD", "\(prefix):queues", q])
        // The stored hash is the example, field for field.
        #expect(try await redis.send(["HGETALL", "\(prefix):{\(q)}:job:\(id)"]).fieldValues == example)

        let queue = JobQueue(
            redis: try await TestRedis.pool(), configuration: JobQueueConfiguration(prefix: prefix), logger: TestRedis.logger)
        let stored = try #require(try await queue.job(id: id))
        #expect(stored == JobRecord(fields: example, id: id, queue: q))
        #expect(stored.attempt == 0 && stored.enqueuedAt == stored.createdAt && stored.maxAttempts == 3)
        // The same idempotency key through the Swift producer finds the same job.
        let again = try await queue.enqueue(EnqueueRequest(type: "noop", queue: q, idempotencyKey: idempotencyKey))
        #expect(again == EnqueueResult(id: id, created: false))
    }
}
