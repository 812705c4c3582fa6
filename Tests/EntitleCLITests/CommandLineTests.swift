import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

@Suite struct CommandLineTests {
    @Test func enqueueShowQueuesAndDeadJobs() async throws {
        try await commands(try await CLI("cli"))
    }

    /// The same commands on a 3-primary Redis Cluster, and `--redis-cluster`.
    @Test func enqueueShowQueuesAndDeadJobsOnACluster() async throws {
        let cluster = try await LocalRedisCluster.start(replicas: 0)
        do {
            let cli = try await CLI("cli-cluster", url: cluster.url)
            try await commands(cli)
            let seeds = cluster.nodes.prefix(2).map(\.address).joined(separator: ",")
            let listed = try await ChildProcess.run(
                ChildProcess.entitleExecutable, ["queues", "--json", "--redis-cluster", seeds, "--prefix", cli.prefix])
            #expect(listed.status == 0, "\(listed.errors)")
            let queues =
                (try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [String: Any])?["queues"] as? [[String: Any]] ?? []
            #expect(Set(queues.compactMap { $0["name"] as? String }) == ["default", "later", "poison"])
            for queue in queues {
                let name = queue["name"] as? String ?? ""
                let primary = try await cluster.primary(forKey: "{\(name)}")
                #expect(queue["node"] as? String == primary.address, "queue \(name)")
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    private func commands(_ cli: CLI) async throws {
        let enqueued = try await cli.run(["enqueue", "noop", "--payload", #"{"sleepMs":1}"#, "--count", "3"])
        #expect(enqueued.status == 0)
        let ids = enqueued.output.split(separator: "\n").map(String.init)
        #expect(ids.count == 3 && Set(ids).count == 3)

        let job = try await cli.json(["jobs", "show", ids[0], "--json", "--payload"])
        #expect(job["id"] as? String == ids[0])
        #expect(job["type"] as? String == "noop")
        #expect(job["status"] as? String == "queued")
        #expect(job["attempt"] as? Int == 0)
        #expect((job["payload"] as? [String: Any])?["sleepMs"] as? Int == 1)

        let stats = try await cli.queueStats()
        #expect(stats["pending"] as? Int == 3)
        #expect(stats["enqueued"] as? Int == 3)
        for field in ["scheduled", "active", "dead", "oldestPendingAgeSeconds", "succeeded", "retried"] {
            #expect(stats[field] != nil, "\(field)")
        }

        let first = try await cli.run(["enqueue", "noop", "--idempotency-key", "once"])
        let again = try await cli.run(["enqueue", "noop", "--idempotency-key", "once"])
        #expect(first.output == again.output && first.status == 0)

        let delayed = try await cli.run(["enqueue", "noop", "--delay", "60", "--queue", "later"])
        let delayedJob = try await cli.json(["jobs", "show", delayed.output.trimmingCharacters(in: .whitespacesAndNewlines), "--json"])
        #expect(delayedJob["status"] as? String == "scheduled")
        #expect(try await cli.queueStats("later")["scheduled"] as? Int == 1)

        // A dead job, by hand: list, retry, purge.
        let poisoned = try await cli.run(["enqueue", "noop", "--payload", #"{"sleepMs":"x"}"#, "--queue", "poison"])
        let poisonID = poisoned.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let worker = try cli.start(["worker", "--queues", "poison=1"])
        try await eventually("the poisoned job to die") { try await cli.queueStats("poison")["dead"] as? Int == 1 }
        worker.signal(SIGTERM)
        #expect(try await worker.wait() == 0)
        let dead = try await cli.json(["dead", "list", "--json", "--queue", "poison"])["jobs"] as? [[String: Any]] ?? []
        #expect(dead.map { $0["id"] as? String } == [poisonID])
        #expect(dead.first?["lastError"] as? String != nil)
        let retried = try await cli.run(["dead", "retry", poisonID])
        #expect(retried.status == 0 && retried.output.contains("requeued 1"))
        #expect(try await cli.queueStats("poison")["pending"] as? Int == 1)
        try await cli.redis.send(["RPOPLPUSH", cli.key("poison", "pending"), cli.key("poison", "pending")])
        let purged = try await cli.run(["dead", "purge", "--all", "--queue", "poison"])
        #expect(purged.status == 0)
    }

    @Test(arguments: [
        (["enqueue", "noop", "--payload", "{not json"], "not valid JSON"),
        (["enqueue", "bad type"], "job type"),
        (["enqueue", "noop", "--count", "0"], "--count"),
        (["enqueue", "noop", "--count", "2", "--idempotency-key", "k"], "idempotency"),
        (["worker", "--queues", "default"], "NAME=CONCURRENCY"),
        (["worker", "--queues", "default=0"], "concurrency"),
        (["queues", "--redis", "http://nope"], "Redis URL"),
        (["jobs", "show", "no-such-job"], "no job"),
        (["dead", "retry"], "--all"),
        (["no-such-command"], "Usage"),
        // Numbers that would trap if converted unchecked.
        (["enqueue", "noop", "--delay", "1e300"], "--delay must be 0 to"),
        (["enqueue", "noop", "--delay", "nan"], "--delay must be 0 to"),
        (["enqueue", "noop", "--delay=-1"], "--delay must be 0 to"),
        (["worker", "--shutdown-timeout", "1e300"], "--shutdown-timeout must be 0 to 3600"),
        (["worker", "--heartbeat-ttl", "inf"], "--heartbeat-ttl must be 1 to 3600"),
        (["worker", "--prefetch=-1"], "--prefetch must be 0 to 1000"),
        (["api", "--idle-timeout", "1e300"], "--idle-timeout must be 1 to 3600"),
    ])
    func badArgumentsGiveAMessageAndANonZeroExit(_ arguments: [String], _ message: String) async throws {
        let cli = try await CLI("bad")
        // A test that brings its own --redis must not get the harness's appended after it.
        let result =
            arguments.contains("--redis")
            ? try await ChildProcess.run(ChildProcess.entitleExecutable, arguments + ["--prefix", cli.prefix])
            : try await cli.run(arguments)
        #expect(result.status != 0)
        #expect((result.output + result.errors).contains(message), "\(result.errors)")
        // Nothing was queued.
        #expect(try await cli.redis.send(["EXISTS", cli.key("default", "pending")]).int == 0)
    }

    /// `ENTITLE_JOB_FORMAT`: the job hash's first, second or third format for a rolling
    /// upgrade, the fourth unless set, anything else refused before anything is queued.
    @Test func theJobFormatIsChosenByTheEnvironment() async throws {
        let cli = try await CLI("job-format")
        func enqueue(_ format: String) async throws -> (status: Int32, output: String, errors: String) {
            try await ChildProcess.run(
                ChildProcess.entitleExecutable, ["enqueue", "noop"] + cli.common, environment: ["ENTITLE_JOB_FORMAT": format])
        }
        let refused = try await enqueue("5")
        #expect(refused.status == 64 && refused.errors.contains("ENTITLE_JOB_FORMAT must be 1, 2, 3 or 4, not '5'"), "\(refused.errors)")
        #expect(try await cli.redis.send(["EXISTS", cli.key("default", "pending")]).int == 0)
        for (format, hasQueueField, status) in [
            ("1", true, "queued"), ("2", false, "queued"), ("3", false, nil), ("4", false, nil), ("", false, nil),
        ] {
            let made = try await enqueue(format)
            let id = made.output.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(made.status == 0 && !id.isEmpty, "\(made.errors)")
            let stored = try await cli.redis.send(["HGETALL", cli.key("default", "job:\(id)")]).fieldValues
            #expect((stored["queue"] != nil) == hasQueueField && stored["status"] == status, "format '\(format)': \(stored)")
        }
    }

    /// More jobs than one batch: two batches of 10,000 go at once, and every id is printed
    /// once, one a line, each a job in the queue.
    @Test func aBulkEnqueueOfMoreThanOneBatchPrintsEveryId() async throws {
        let cli = try await CLI("cli-bulk")
        let enqueued = try await cli.run(["enqueue", "noop", "--count", "25001"])
        #expect(enqueued.status == 0, "\(enqueued.errors)")
        let ids = enqueued.output.split(separator: "\n")
        #expect(ids.count == 25_001 && Set(ids).count == 25_001)
        #expect(try await cli.queueStats()["pending"] as? Int == 25_001)
    }

    @Test func aWorkerProcessServesPrometheusMetrics() async throws {
        let cli = try await CLI("metrics")
        let port = try LocalRedisServer.freePort()
        let worker = try cli.start(["worker", "--queues", "default=4", "--metrics-port", String(port)])
        _ = try await cli.run(["enqueue", "noop", "--count", "25"])
        _ = try await cli.run(["enqueue", "noop", "--payload", #"{"failTimes":1}"#])
        try await eventually("26 jobs to succeed") { try await cli.queueStats()["succeeded"] as? Int == 26 }
        var text = ""
        try await eventually("the metrics endpoint to show the queue gauges") {
            guard let (data, _) = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!) else {
                return false
            }
            text = String(decoding: data, as: UTF8.self)
            return text.contains("entitle_queue_pending{queue=\"default\"}")
        }
        #expect(text.contains(#"entitle_jobs_succeeded_total{queue="default",type="noop"} 26"#))
        #expect(text.contains(#"entitle_jobs_retried_total{queue="default",type="noop"} 1"#))
        #expect(text.contains(#"entitle_jobs_started_total{queue="default",type="noop"} 27"#))
        #expect(text.contains("entitle_job_run_seconds_bucket"))
        #expect(text.contains("entitle_job_wait_seconds_bucket"))
        #expect(text.contains("entitle_queue_oldest_pending_age_seconds"))
        worker.signal(SIGTERM)
        #expect(try await worker.wait() == 0)
    }

    @Test func sigtermRequeuesRunningJobsAndExitsCleanly() async throws {
        let cli = try await CLI("sigterm")
        let worker = try cli.start(["worker", "--queues", "default=2", "--shutdown-timeout", "0.5"])
        let ids = try await cli.run(["enqueue", "noop", "--payload", #"{"sleepMs":60000}"#, "--count", "3"]).output.split(separator: "\n")
            .map(String.init)
        // Two run; the third is claimed ahead of a free slot (the default prefetch, a quarter
        // of the concurrency rounded up) and waits in the worker.
        try await eventually("two jobs to run and one to wait") { try await cli.queueStats()["active"] as? Int == 3 }
        worker.signal(SIGTERM)
        #expect(try await worker.wait(timeout: .seconds(10)) == 0)
        let stats = try await cli.queueStats()
        #expect(stats["pending"] as? Int == 3)
        #expect(stats["active"] as? Int == 0)
        #expect(stats["dead"] as? Int == 0)
        for id in ids {
            let job = try await cli.json(["jobs", "show", id, "--json"])
            #expect(job["status"] as? String == "queued")
            #expect(job["attempt"] as? Int == 0)
        }
    }
}
