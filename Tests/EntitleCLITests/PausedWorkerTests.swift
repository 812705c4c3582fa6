import Foundation
import JobQueue
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
        try await eventually("the other worker to reap and start the job", timeout: .seconds(90)) {
            let lease = try await cli.redis.send(["HGET", cli.key(queue, "job:\(taken)"), "lease"]).string ?? ""
            return lease.contains(":\(other.pid):")
        }
        paused.signal(SIGCONT)

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
            "each job ran once (the woken worker ran none), and again only when retried (\(retried)): \(effects)")
        for process in [paused, other] { process.signal(SIGTERM) }
        for process in [paused, other] { #expect(try await process.wait() == 0) }
    }
}
