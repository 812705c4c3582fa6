import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// `Jobs/enqueue.lua` checks what `EnqueueRequest.validate()` checks, and that the keys are
/// the ones ARGV implies, for producers that run it without the Swift side.
@Suite struct EnqueueScriptTests {
    /// What a producer in another language can get wrong, and the rule the script names.
    enum Defect: String, CaseIterable, Sendable {
        case typeName, idName, longID, payloadNotJSON, maxAttemptsAbove1000, maxAttemptsNegative, runAtNotANumber
        case longIdempotencyKey, longUniqueKey, holderNotAnID, longLabel, badTraceparent, jobKeyOfAnotherQueue
        case idempotencyKeyNotGiven, idempotencyKeyNotNamed, uniqueKeyNotGiven, holderKeyNotGiven
        case queueWithColon, pendingOfAnotherQueue, statsKeyWrong, idempotencyTTLZero, nowNotANumber, tenthValueOnOneJob

        /// The start of the error reply: a job's defects name the job (the second, here).
        var refusal: String {
            switch self {
            case .typeName: "ERR enqueue job 2: the type must be"
            case .idName, .longID: "ERR enqueue job 2: the id must be"
            case .payloadNotJSON: "ERR enqueue job 2: the payload must be JSON"
            case .maxAttemptsAbove1000, .maxAttemptsNegative: "ERR enqueue job 2: maxAttempts must be 0"
            case .runAtNotANumber: "ERR enqueue job 2: the run-at time must be"
            case .longIdempotencyKey: "ERR enqueue job 2: the idempotency key must have at most 256 bytes"
            case .longUniqueKey: "ERR enqueue job 2: the unique key must have at most 256 bytes"
            case .holderNotAnID: "ERR enqueue job 2: the holder must be"
            case .longLabel: "ERR enqueue job 2: the label must have at most 512 bytes"
            case .badTraceparent: "ERR enqueue job 2: the traceparent must be"
            case .jobKeyOfAnotherQueue: "ERR enqueue job 2: KEYS[9] must be"
            case .idempotencyKeyNotGiven, .idempotencyKeyNotNamed: "ERR enqueue job 2: KEYS[10] must be"
            case .uniqueKeyNotGiven: "ERR enqueue job 2: KEYS[11] must be"
            case .holderKeyNotGiven: "ERR enqueue job 2: KEYS[12] must be"
            case .queueWithColon: "ERR enqueue: ARGV[3], the queue"
            case .pendingOfAnotherQueue: "ERR enqueue: KEYS[1] must be"
            case .statsKeyWrong: "ERR enqueue: KEYS[2], KEYS[3] and KEYS[4] must be"
            case .idempotencyTTLZero: "ERR enqueue: ARGV[2]"
            case .nowNotANumber: "ERR enqueue: ARGV[1]"
            case .tenthValueOnOneJob: "ERR enqueue: ARGV takes 4 values, then 9 or 10 per job"
            }
        }
    }

    /// The script checks what `EnqueueRequest.validate()` checks (and that the keys are the ones
    /// ARGV implies) for producers that run it without the Swift side: a defect in the second
    /// job refuses the whole call, the first job included, and nothing is written.
    @Test(arguments: Defect.allCases)
    func theShippedScriptRefusesWhatItCanCheckAndWritesNothing(_ defect: Defect) async throws {
        let prefix = TestRedis.uniquePrefix("refuse")
        let redis = RedisConnection(configuration: try await TestRedis.configuration(), logger: TestRedis.logger)
        let source = String(decoding: try Data(contentsOf: JobsFolderTests.jobsFolder.appendingPathComponent("enqueue.lua")), as: UTF8.self)
        var queue = "q"
        if defect == .queueWithColon { queue = "a:b" }
        let base = "\(prefix):{\(queue)}:"
        var keys = [base + "pending", base + "scheduled", base + "stats", base + "recent"]
        if defect == .pendingOfAnotherQueue { keys[0] = "\(prefix):{other}:pending" }
        if defect == .statsKeyWrong { keys[2] = base + "counters" }
        var arguments = [String(JobQueueNow.milliseconds), defect == .idempotencyTTLZero ? "0" : "86400000", queue, "200"]
        if defect == .nowNotANumber { arguments[0] = "now" }
        // Job 1 is good; job 2 carries the defect.
        arguments += ["good-1", "noop", "{}", "0", "0", "", "", "", ""]
        keys += Array(repeating: base + "job:good-1", count: 4)
        var id = "bad-2"
        switch defect {
        case .idName: id = "bad/2"
        case .longID: id = String(repeating: "x", count: 129)
        default: break
        }
        var job = [
            id, defect == .typeName ? "no op" : "noop", defect == .payloadNotJSON ? "{not json" : #"{"sleepMs":5}"#,
            defect == .maxAttemptsAbove1000 ? "1001" : defect == .maxAttemptsNegative ? "-1" : "3",
            defect == .runAtNotANumber ? "soon" : "0", "", "", "", defect == .longLabel ? String(repeating: "l", count: 513) : "label",
        ]
        let jobKey = defect == .jobKeyOfAnotherQueue ? "\(prefix):{other}:job:\(id)" : base + "job:" + id
        var jobKeys = [jobKey, jobKey, jobKey, jobKey]
        switch defect {
        case .longIdempotencyKey:
            job[5] = String(repeating: "k", count: 257)
            jobKeys[1] = base + "idem:" + job[5]
        case .longUniqueKey:
            job[6] = String(repeating: "u", count: 257)
            jobKeys[2] = base + "unique:" + job[6]
        case .holderNotAnID:
            (job[6], job[7]) = ("u", "not an id")
            (jobKeys[2], jobKeys[3]) = (base + "unique:u", base + "job:not an id")
        case .idempotencyKeyNotGiven: job[5] = "order-1"
        case .idempotencyKeyNotNamed: jobKeys[1] = base + "idem:order-1"
        case .uniqueKeyNotGiven: job[6] = "purchase:1"
        case .holderKeyNotGiven: (job[6], job[7], jobKeys[2]) = ("purchase:1", "holder-1", base + "unique:purchase:1")
        default: break
        }
        if defect == .badTraceparent {
            // Ten values per job: the first gets an empty traceparent.
            arguments.append("")
            job.append("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01")
        }
        if defect == .tenthValueOnOneJob { job.append("") }
        keys += jobKeys
        arguments += job

        let error = try await #require(throws: RedisError.self) {
            try await redis.send(["EVAL", source, String(keys.count)] + keys + arguments)
        }
        #expect(error.message.hasPrefix(defect.refusal), "\(error.message)")
        for key in Set(keys).union([base + "idem:order-1", base + "unique:purchase:1", base + "unique:u"]) {
            #expect(try await redis.send(["EXISTS", key]).int == 0, "\(key)")
        }
        // The first job alone goes through: the checks refuse only what is wrong.
        guard defect.refusal.hasPrefix("ERR enqueue job") else { return }
        let good = try await redis.send(
            ["EVAL", source, "8"] + Array(keys.prefix(8)) + Array(arguments.prefix(13)))
        #expect(good.array == [.bulk(Array("good-1".utf8)), .integer(1)])
    }

    /// The script's checks refuse nothing the Swift producer accepts: every limit at its edge.
    @Test func theScriptTakesEveryRequestTheSwiftProducerTakes() async throws {
        let h = try await QueueHarness("edges")
        var longest = EnqueueRequest(
            type: String(repeating: "t", count: 127) + ":", payload: #"[1, "two", {"three": null}, 4.5e3, true]"#, queue: h.name,
            idempotencyKey: String(repeating: "é", count: 128), delay: EnqueueRequest.maximumDelay, maxAttempts: 1000,
            id: "A-z_0.9:" + String(repeating: "i", count: 120), uniqueKey: String(repeating: "{", count: 256))
        longest.label = String(repeating: "ü", count: 256)
        longest.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + String(repeating: "f", count: 72)
        var plain = h.request(payload: "\"text\"", maxAttempts: 1)
        plain.traceparent = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        for request in [longest, plain] { try request.validate() }
        let results = try await h.queue.enqueue(batch: [longest, plain])
        #expect(results.map(\.outcome) == [.created, .created])
        let stored = try #require(try await h.job(longest.id ?? ""))
        #expect(stored.status == .scheduled && stored.maxAttempts == 1000 && stored.label == longest.label)
        #expect(stored.idempotencyKey == longest.idempotencyKey && stored.traceparent == longest.traceparent)
        #expect(try await h.job(results[1].id)?.payload == "\"text\"")
    }
}
