import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// The race fault injection found: a worker paused (SIGSTOP) while its BLMOVE waits on the
/// server wakes after another worker reaped and restarted the job that BLMOVE moved. It must
/// not run it (a start of its own used to overwrite the other worker's lease, so both acks
/// were refused and the job stayed "processing" for good). The start sent with the BLMOVE
/// started the job for the paused worker, so its reaping spends that attempt: the job ends
/// on attempt 2, run by the other worker only.
@Suite struct PausedWorkerTests {
    @Test(.timeLimit(.minutes(3))) func aWorkerWokenAfterItsJobWasReapedDoesNotStartIt() async throws {
        let cli = try await CLI("paused")
        let queue = "paused-\(UUID().uuidString.prefix(6).lowercased())"
        // BLMOVE blocks 5 s on the server: time to enqueue while the paused one still waits.
        let arguments = ["worker", "--queues", "\(queue)=64", "--heartbeat-ttl", "2", "--block-timeout", "5"]
        // Loaded first, so the start sent with the paused worker's BLMOVE runs rather than
        // failing with NOSCRIPT (which leaves the job unstarted until the worker wakes).
        _ = try await cli.redis.send(["SCRIPT", "LOAD", QueueScripts.startClaimed.source])
        let paused = try cli.start(arguments)
        let other = try cli.start(arguments)
        defer {
            for process in [paused, other] where process.isRunning {
                process.signal(SIGCONT)
                process.signal(SIGKILL)
            }
        }
        // Both idle, blocked in BLMOVE for at most a second so far (`idle` counts from the call).
        try await eventually("both workers to block in BLMOVE") {
            let clients = try await cli.redis.send(["CLIENT", "LIST", "TYPE", "normal"]).string ?? ""
            let blocked = clients.split(separator: "\n").filter { $0.contains("name=fetch-\(queue)-") && $0.contains("cmd=blmove") }
            return blocked.count == 2 && blocked.allSatisfy { $0.contains(" idle=0 ") || $0.contains(" idle=1 ") }
        }
        let consumers = try await cli.redis.send(["ZRANGE", cli.key(queue, "consumers"), "0", "-1"]).array?.compactMap(\.string) ?? []
        let pausedConsumer = try #require(consumers.first { $0.contains(":\(paused.pid):") })

        paused.signal(SIGSTOP)
        let producer = JobQueue(redis: cli.redis, configuration: JobQueueConfiguration(prefix: cli.prefix), logger: TestRedis.logger)
        _ = try await producer.enqueue(
            batch: (0..<40).map { _ in EnqueueRequest(type: "noop", payload: #"{"effect":"paused","sleepMs":8000}"#, queue: queue) })
        // The paused worker's BLMOVE, already on the server, took one job into its active list.
        var taken = ""
        try await eventually("the paused worker's BLMOVE to take a job") {
            taken = try await cli.redis.send(["LINDEX", cli.key(queue, "active:\(pausedConsumer)"), "0"]).string ?? ""
            return !taken.isEmpty
        }
        // Past the heartbeat TTL the other worker reaps it, and starts the job itself.
        do {
            try await eventually("the other worker to reap and start the job", timeout: .seconds(90)) {
                let lease = try await cli.redis.send(["HGET", cli.key(queue, "job:\(taken)"), "lease"]).string ?? ""
                return lease.contains(":\(other.pid):")
            }
        } catch let timedOut as TimedOut {
            // What the other worker saw and what Redis holds, for a failure on a loaded machine.
            let consumersNow = try await cli.redis.send(["ZRANGE", cli.key(queue, "consumers"), "0", "-1", "WITHSCORES"]).array?.compactMap(
                \.string)
            let job = try await cli.redis.send(["HGETALL", cli.key(queue, "job:\(taken)")]).fieldValues.filter { $0.key != "payload" }
            let pending = try await cli.redis.send(["LLEN", cli.key(queue, "pending")]).int ?? -1
            // The third field of /proc/PID/stat: T when stopped, as SIGSTOP should leave it.
            let state = (try? String(contentsOfFile: "/proc/\(paused.pid)/stat", encoding: .utf8))?.split(separator: " ").dropFirst(2).first
            Issue.record(
                """
                \(timedOut): paused worker's state \(state ?? "?"), other running \(other.isRunning), now \(Int64(Date().timeIntervalSince1970 * 1000)) ms, consumers \(consumersNow ?? []), \
                pending \(pending), job \(job); the other worker said: \(String(other.errors.suffix(3000)))
                """)
            throw timedOut
        }
        paused.signal(SIGCONT)
        // Woken, it finds the job reaped (or cannot tell) and does not run it.
        do {
            try await eventually("the woken worker to leave the job alone", timeout: .seconds(60)) {
                paused.errors.contains("not running")
            }
        } catch let timedOut as TimedOut {
            let job = try await cli.redis.send(["HGETALL", cli.key(queue, "job:\(taken)")]).fieldValues.filter { $0.key != "payload" }
            Issue.record("\(timedOut): job \(job); the woken worker said: \(String(paused.errors.suffix(3000)))")
            throw timedOut
        }

        try await eventually("all 40 jobs to succeed", timeout: .seconds(60)) {
            try await cli.redis.send(["HGET", cli.key(queue, "stats"), "succeeded:noop"]).int == 40
        }
        let job = try await cli.redis.send(["HGETALL", cli.key(queue, "job:\(taken)")]).fieldValues
        #expect(job["status"] == "succeeded")
        // A retry is a run the queue counts (on a loaded machine the effect's script once timed
        // out after it had run: runs 41, applied 40, its job's attempt one more, with its
        // lastError); a run by the woken worker is a run nothing counts.
        let retried = try await cli.redis.send(["HGET", cli.key(queue, "stats"), "retried:noop"]).int ?? 0
        #expect(
            job["attempt"] == "2" || (retried > 0 && job["lastError"] != nil),
            "started for the paused worker, reaped, then run by the other: \(job.filter { $0.key != "payload" })")
        let stats = try await cli.queueStats(queue)
        #expect(stats["active"] as? Int == 0 && stats["pending"] as? Int == 0)
        #expect(stats["reaped"] as? Int == 1)
        let effects = try await cli.redis.send(["HGETALL", cli.key(queue, "effects:paused")]).fieldValues
        #expect(
            effects["applied"] == "40" && Int(effects["runs"] ?? "") == 40 + retried,
            "each job ran once (the woken worker ran none), and again only when retried (\(retried)): \(effects); the woken worker said: \(String(paused.errors.suffix(2000)))"
        )
        for process in [paused, other] { process.signal(SIGTERM) }
        for process in [paused, other] { #expect(try await process.wait() == 0) }
    }

    /// A job claimed ahead (started, waiting for the worker's one handler slot) when its
    /// worker is paused past its heartbeat TTL is reaped and run by another worker. Once the
    /// woken worker's slot frees, it must find that out and not run the job as well.
    @Test(.timeLimit(.minutes(3))) func aJobClaimedAheadAndReapedDuringAPauseIsNotRunAgain() async throws {
        let cli = try await CLI("paused-ahead")
        let queue = "ahead-\(UUID().uuidString.prefix(6).lowercased())"
        let producer = JobQueue(redis: cli.redis, configuration: JobQueueConfiguration(prefix: cli.prefix), logger: TestRedis.logger)
        // Queued before the worker starts: it claims both at once, runs the first and starts
        // the second to wait for the slot.
        let first = try await producer.enqueue(
            EnqueueRequest(type: "noop", payload: #"{"effect":"ahead-first","sleepMs":3000}"#, queue: queue)
        ).id
        let second = try await producer.enqueue(EnqueueRequest(type: "noop", payload: #"{"effect":"ahead-second"}"#, queue: queue)).id
        let paused = try cli.start(["worker", "--queues", "\(queue)=1", "--prefetch", "1", "--heartbeat-ttl", "2"])
        var other: ChildProcess?
        defer {
            for process in [paused] + (other.map { [$0] } ?? []) where process.isRunning {
                process.signal(SIGCONT)
                process.signal(SIGKILL)
            }
        }
        func field(_ id: String, _ name: String) async throws -> String {
            try await cli.redis.send(["HGET", cli.key(queue, "job:\(id)"), name]).string ?? ""
        }
        try await eventually("the worker to start both") {
            let leases = [try await field(first, "lease"), try await field(second, "lease")]
            return leases.allSatisfy { $0.contains(":\(paused.pid):") }
        }
        paused.signal(SIGSTOP)
        let reaper = try cli.start(["worker", "--queues", "\(queue)=4", "--heartbeat-ttl", "2"])
        other = reaper
        try await eventually("the other worker to reap both and run the second", timeout: .seconds(90)) {
            try await field(second, "status") == "succeeded"
        }
        paused.signal(SIGCONT)
        // It finds the second reaped (and says so), or, were the check gone, runs it again.
        try await eventually("the woken worker to find the second reaped", timeout: .seconds(60)) {
            let runs = try await cli.redis.send(["HGET", cli.key(queue, "effects:ahead-second"), "runs"]).int ?? 0
            return paused.errors.contains("not running it") || runs > 1
        }
        try await eventually("the first to succeed", timeout: .seconds(60)) { try await field(first, "status") == "succeeded" }
        let effects = try await cli.redis.send(["HGETALL", cli.key(queue, "effects:ahead-second")]).fieldValues
        #expect(effects["applied"] == "1" && effects["runs"] == "1", "the second ran once, by the other worker: \(effects)")
        // The first was running when the pause came: its handler goes on after it, but its
        // lease keeps its effect to the other worker's run.
        let firstEffects = try await cli.redis.send(["HGETALL", cli.key(queue, "effects:ahead-first")]).fieldValues
        #expect(firstEffects["applied"] == "1")
        let stats = try await cli.queueStats(queue)
        #expect(stats["active"] as? Int == 0 && stats["pending"] as? Int == 0)
        for process in [paused, reaper] { process.signal(SIGTERM) }
        for process in [paused, reaper] { #expect(try await process.wait() == 0) }
    }
}
