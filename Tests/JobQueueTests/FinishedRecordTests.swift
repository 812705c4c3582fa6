import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// A finished job keeps what is read, not its input; and once its long input is gone its
/// record takes the compact encoding again. Redis keeps a hash that ever held a long value
/// (over `hash-max-listpack-value`, 64 bytes by default) as a hashtable, about twice the
/// bytes of the listpack the same fields take when written afresh.
@Suite struct FinishedRecordTests {
    @Test func aJobThatHadALongInputIsKeptCompactOnceFinished() async throws {
        let h = try await QueueHarness("finished-record")
        let long = try await h.enqueue(payload: #"{"pad":"\#(String(repeating: "x", count: 4_000))"}"#)
        let short = try await h.enqueue(payload: #"{"pad":"x"}"#)
        func encoding(_ id: String) async throws -> String? { try await h.redis.send(["OBJECT", "ENCODING", h.keys.job(id)]).string }
        func bytes(_ id: String) async throws -> Int {
            try #require(try await h.redis.send(["MEMORY", "USAGE", h.keys.job(id), "SAMPLES", "0"]).int)
        }
        #expect(try await encoding(long) == "hashtable", "queued with its long input")
        let finished = try await h.whileRunning(h.worker()) {
            (try await h.waitForStatus(long, .succeeded), try await h.waitForStatus(short, .succeeded))
        }
        // What a poller reads is all there; the input is not.
        for record in [finished.0, finished.1] {
            #expect(record.result?.hasPrefix(#"{"ok":true"#) == true && record.finishedAt != nil && record.payload.isEmpty, "\(record)")
        }
        #expect(try await h.redis.send(["HEXISTS", h.keys.job(long), "payload"]).int == 0)
        #expect(try await h.redis.send(["PTTL", h.keys.job(long)]).int ?? -1 > 0, "kept for the result TTL")
        #expect(try await encoding(long) == "listpack")
        let (compact, plain) = (try await bytes(long), try await bytes(short))
        #expect(abs(compact - plain) < 64, "as small as a job that never had a long input: \(compact) B against \(plain) B")
    }

    /// A receipt job's result as Entitle's handler gives it (about 800 bytes).
    static let receiptResult = #"""
        {"accessGranted":true,"claim":{"heldByAnotherCustomer":false,"outcome":"granted","proofSignedAt":"2026-11-27T07:04:01Z"},\#
        "credits":{"added":0,"balance":0},"currency":"USD","customer":"m23@example.com","entitlements":["hd","premium"],\#
        "offerId":"premium","originalTransactionId":"2179576304051424","price":"0","productId":"com.entitle.demo.premium.monthly",\#
        "publisher":"demo","subscription":{"asOf":"2026-11-27T07:04:01Z","autoRenew":true,\#
        "autoRenewProductId":"com.entitle.demo.premium.monthly","expiresDate":"2026-11-27T07:07:01Z","isInBillingRetry":false,\#
        "isIntroductoryOffer":true,"latestTransactionId":"2179576304051424","offerId":"premium",\#
        "originalTransactionId":"2179576304051424","productId":"com.entitle.demo.premium.monthly","status":"active"},\#
        "transactionId":"2179576304051424"}
        """#

    /// The fourth format keeps a long result packed, in pieces a listpack holds: with a long
    /// input and a receipt's result, the finished record is listpack-encoded under Redis's
    /// default settings and about a third of the third format's bytes, and reads back as
    /// the handler gave it, whole and by outcome.
    @Test func aLongResultIsKeptPackedAndReadsBackAsGiven() async throws {
        var bytes: [JobHashFormat: Int] = [:]
        for format in [JobHashFormat.third, .fourth] {
            var configuration = JobQueueConfiguration()
            configuration.hashFormat = format
            let h = try await QueueHarness("packed-result", configuration: configuration)
            var registry = JobHandlerRegistry.builtIn()
            registry.register("receipt", JobRegistration(handler: ClosureHandler { _ in Self.receiptResult }))
            let id = try await h.enqueue("receipt", payload: #"{"signedTransaction":"\#(String(repeating: "x", count: 4_000))"}"#)
            let record = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .succeeded) }
            #expect(record.result == Self.receiptResult, "\(format)")
            #expect(try await h.queue.outcomes(ids: [id], queue: h.name).first??.result == Self.receiptResult, "\(format)")
            let stored = try await h.redis.send(["HGETALL", h.keys.job(id)]).fieldValues
            let encoding = try await h.redis.send(["OBJECT", "ENCODING", h.keys.job(id)]).string
            bytes[format] = try #require(try await h.redis.send(["MEMORY", "USAGE", h.keys.job(id), "SAMPLES", "0"]).int)
            if format == .fourth {
                #expect(stored["result"]?.hasPrefix("z1:") == true && stored["result2"] != nil, "\(stored)")
                #expect(stored.values.allSatisfy { $0.utf8.count <= 64 } && encoding == "listpack", "\(stored)")
            } else {
                #expect(stored["result"] == Self.receiptResult && stored["result2"] == nil && encoding == "hashtable")
            }
        }
        let (packed, plain) = (try #require(bytes[.fourth]), try #require(bytes[.third]))
        #expect(packed * 2 < plain, "\(packed) B packed against \(plain) B")
    }

    /// Whatever a handler returns reads back as it was, through a real worker, in either
    /// format: empty, short, at the piece length and either side of it, long, longer than
    /// 16 pieces packed, incompressible, and multi-byte text whose pieces split characters.
    @Test(arguments: [JobHashFormat.third, .fourth])
    func everyResultReadsBackAsTheHandlerGaveIt(_ format: JobHashFormat) async throws {
        var generator = SystemRandomNumberGenerator()
        let noise = (0..<3_000).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        let results = [
            "", "0", "null", #""z1:not packed""#, String(repeating: "a", count: 62) + "\"\"",
            #"[""# + String(repeating: "b", count: 62) + #""]"#,
            #"{"s":""# + String(repeating: "é", count: 40) + #"","t":"ünïcödé ✓ 🎟️"}"#,
            Self.receiptResult, #"{"noise":""# + String(noise.prefix(600)) + #""}"#, #"{"noise":""# + noise + #""}"#,
            #"{"many":[\#((0..<2_000).map { #"{"i":\#($0)}"# }.joined(separator: ","))]}"#,
            // Not JSON, but marked as a packed result is: read back as a JSON string of it.
            "z1:not JSON", "z1:" + String(repeating: "y", count: 300),
        ]
        func expected(_ result: String) -> String { result.hasPrefix("z1:") ? #""\#(result)""# : result }
        var configuration = JobQueueConfiguration()
        configuration.hashFormat = format
        let h = try await QueueHarness("every-result", configuration: configuration)
        var registry = JobHandlerRegistry.builtIn()
        registry.register("echo", JobRegistration(handler: ClosureHandler { job in results[Int(job.payload)!] }))
        var ids: [String] = []
        for index in results.indices { ids.append(try await h.enqueue("echo", payload: String(index))) }
        let records = try await h.whileRunning(h.worker(registry: registry)) {
            var records: [JobRecord] = []
            for id in ids { records.append(try await h.waitForStatus(id, .succeeded)) }
            return records
        }
        let outcomes = try await h.queue.outcomes(ids: ids, queue: h.name)
        for (index, result) in results.enumerated() {
            // An empty result is stored as the handler gave it, and read as such.
            #expect(records[index].result == expected(result), "result \(index), \(format)")
            #expect(outcomes[index]?.result == expected(result), "outcome \(index), \(format)")
            let stored = try await h.redis.send(["HGETALL", h.keys.job(ids[index])]).fieldValues
            let packed = stored["result"]?.hasPrefix("z1:") == true
            #expect(!packed || format == .fourth, "result \(index) packed in the third format")
            #expect(!packed || stored.keys.allSatisfy { !$0.hasPrefix("result") || stored[$0]!.utf8.count <= 64 })
        }
    }

    /// A packed result that was damaged, or written with another dictionary, reads as none
    /// rather than as other text; the record itself stays readable.
    @Test func aDamagedPackedResultReadsAsNone() async throws {
        let h = try await QueueHarness("damaged-result")
        var registry = JobHandlerRegistry.builtIn()
        registry.register("receipt", JobRegistration(handler: ClosureHandler { _ in Self.receiptResult }))
        let id = try await h.enqueue("receipt")
        _ = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .succeeded) }
        let second = try #require(try await h.redis.send(["HGET", h.keys.job(id), "result2"]).string)
        try await h.redis.send(["HSET", h.keys.job(id), "result2", String(second.reversed())])
        let record = try #require(try await h.job(id))
        #expect(record.status == .succeeded && record.result == nil)
        try await h.redis.send(["HDEL", h.keys.job(id), "result2"])
        #expect(try await h.job(id)?.result == nil, "a piece missing")
    }

    /// A packed result never reads with pieces left from an earlier one: `finish` removes
    /// those past its own (a record that succeeds again cannot happen through the queue;
    /// the script holds to it anyway).
    @Test func aPackedResultRemovesPiecesPastItsOwn() async throws {
        let h = try await QueueHarness("stale-pieces")
        let (id, lease, consumer) = ("stale-1", "c1:1", "c1")
        let key = h.keys.job(id)
        try await h.redis.send(["HSET", key, "type", "receipt", "createdAt", "1", "status", "processing", "lease", lease])
        for n in 2...6 { try await h.redis.send(["HSET", key, "result\(n)", "stale"]) }
        try await h.redis.send(["LPUSH", h.keys.active(consumer), id])
        let stored = StoredResult.stored(Self.receiptResult)
        #expect(stored.packed && stored.text.utf8.count <= 192, "three pieces at most")
        let keys = [h.keys.active(consumer), h.keys.scheduled, h.keys.dead, h.keys.stats, key]
        let arguments = ["1000", "60000", "60000", h.keys.finished, id, lease, "receipt", "okz", stored.text, "0"]
        #expect(try await h.redis.run(QueueScripts.finish, keys: keys, arguments: arguments).array == [.integer(1)])
        let fields = try await h.redis.send(["HGETALL", key]).fieldValues
        #expect(fields["result4"] == nil && fields["result6"] == nil, "\(fields)")
        #expect(try await h.job(id)?.result == Self.receiptResult)
    }
}
