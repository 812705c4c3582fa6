import DurationUnits
import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

@Suite struct WorkerTests {
    @Test func workersRunEveryJobOnceAndRecordResults() async throws {
        let h = try await QueueHarness("run")
        let ids = try await h.queue.enqueue(batch: (0..<300).map { _ in h.request(payload: #"{"effect":"count"}"#) }).map(\.id)
        try await h.whileRunning(h.worker(concurrency: 8)) {
            try await eventually("300 jobs to succeed", reaches: 300) { try await h.queue.stats(queue: h.name).total("succeeded") }
        }
        let effects = try await h.redis.send(["HGETALL", h.keys.effects("count")]).fieldValues
        #expect(effects["applied"] == "300")
        #expect(effects["runs"] == "300")
        let job = try #require(try await h.job(ids[17]))
        #expect(job.status == .succeeded)
        #expect(job.attempt == 1)
        #expect(job.result?.hasPrefix(#"{"ok":true,"applied":true,"startedUs":"#) == true)
        #expect(job.startedAt != nil && job.finishedAt != nil)
        // Retention is bounded: the finished record expires after the result TTL.
        let ttl = try await h.redis.send(["PTTL", h.keys.job(ids[17])]).int ?? -1
        #expect(ttl > 0 && ttl <= 86_400_000)
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.pending == 0 && stats.active == 0 && stats.consumers == 0)
    }

    @Test func retriesBackOffExponentiallyWithJitterThenSucceed() async throws {
        let h = try await QueueHarness("retry")
        let starts = Box<[Int64]>([])
        let scheduled = Box<[Int64]>([])
        var registry = JobHandlerRegistry()
        registry.register(
            "flaky",
            JobRegistration(
                handler: ClosureHandler { job in
                    starts.update { $0.append(JobQueueNow.milliseconds) }
                    // The record still says when this retry was due: what the back-off chose.
                    if job.attempt > 1, let due = try await h.job(job.id)?.retryAt { scheduled.update { $0.append(due) } }
                    if job.attempt < 3 { throw JobFailure.retryable("flaky", "not yet") }
                    return #"{"attempt":\#(job.attempt)}"#
                },
                retryPolicy: RetryPolicy(base: .milliseconds(400), cap: .seconds(10), maxAttempts: 5)
            ))
        let id = try await h.enqueue("flaky")
        // Three attempts and two back-offs take about 1.2 s; the wait is long because the suite
        // loads both cores (a run with builds beside it took more than 20 s), and a lost retry
        // still times out.
        let job = try await h.whileRunning(h.worker(registry: registry)) {
            try await h.waitForStatus(id, .succeeded, timeout: .seconds(60))
        }
        #expect(job.attempt == 3)
        #expect(job.result == #"{"attempt":3}"#)
        #expect(job.lastError == "flaky: not yet")
        let times = starts.current
        let due = scheduled.current
        try #require(times.count == 3 && due.count == 2)
        // Equal jitter: after attempt n the retry is due between base*2^(n-1)/2 and base*2^(n-1)
        // after the attempt failed, and never runs before it is due. What a failing attempt took
        // before its back-off was chosen is slack: the suite runs worker, simulator and Redis
        // processes on 2 cores, so when a due retry is picked up is not asserted (a lost retry
        // times out above).
        let slack: Int64 = 5000
        for (n, delay) in [(0, Int64(400)), (1, 800)] {
            let chosen = due[n] - times[n]
            #expect(chosen >= delay / 2 && chosen <= delay + slack, "retry \(n + 1) due \(chosen) ms after its attempt")
            #expect(times[n + 1] >= due[n], "retry \(n + 1) ran \(due[n] - times[n + 1]) ms early")
        }
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.counters["retried:flaky"] == 2)
        #expect(stats.counters["succeeded:flaky"] == 1)
    }

    @Test func deferredJobsWaitTheirTurnWithoutSpendingAttempts() async throws {
        let h = try await QueueHarness("defer")
        let runs = Box(0)
        var registry = JobHandlerRegistry()
        registry.register(
            "patient",
            JobRegistration(
                handler: ClosureHandler { job in
                    // Busy five times: more than its two attempts allow, were deferrals failures.
                    let run = runs.update { value -> Int in
                        value += 1
                        return value
                    }
                    if run <= 5 { throw JobFailure.deferred("busy", "another job holds the lock", after: .milliseconds(20)) }
                    return #"{"attempt":\#(job.attempt)}"#
                },
                retryPolicy: RetryPolicy(base: .milliseconds(10), cap: .seconds(1), maxAttempts: 2)
            ))
        let id = try await h.enqueue("patient")
        let job = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .succeeded) }
        #expect(runs.current == 6)
        #expect(job.attempt == 1)
        #expect(job.result == #"{"attempt":1}"#)
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.counters["deferred:patient"] == 5)
        #expect(stats.counters["retried:patient"] == nil)
        #expect(stats.dead == 0)
    }

    @Test func retryDelayFollowsThePolicy() {
        let policy = RetryPolicy(base: .seconds(1), cap: .seconds(10), maxAttempts: 20)
        var generator = SystemRandomNumberGenerator()
        for attempt in 1...8 {
            let ceiling = min(10.0, pow(2, Double(attempt - 1)))
            for _ in 0..<50 {
                let delay = policy.delay(afterAttempt: attempt, using: &generator).seconds
                #expect(delay >= ceiling / 2 - 0.001 && delay <= ceiling + 0.001)
            }
        }
    }

    @Test func outOfAttemptsGoesDeadAndCanBeRetriedOrPurged() async throws {
        let h = try await QueueHarness("dead")
        let id = try await h.enqueue("noop", payload: #"{"failTimes":10}"#, maxAttempts: 2)
        var registry = JobHandlerRegistry()
        registry.register(
            "noop", JobRegistration(handler: NoopHandler(), retryPolicy: RetryPolicy(base: .milliseconds(20), cap: .milliseconds(50))))
        let worker = h.worker(registry: registry)
        let dead = try await h.whileRunning(worker) { try await h.waitForStatus(id, .failed) }
        #expect(dead.attempt == 2)
        #expect(dead.lastError?.hasPrefix("requestedFailure") == true)
        #expect(try await h.queue.deadJobs(queue: h.name).map(\.id) == [id])
        let stats = try await h.queue.stats(queue: h.name)
        #expect(stats.dead == 1 && stats.counters["dead:noop"] == 1 && stats.counters["retried:noop"] == 1)
        let ttl = try await h.redis.send(["PTTL", h.keys.job(id)]).int ?? -1
        #expect(ttl > 86_400_000)  // dead records live as long as the dead set keeps them

        #expect(try await h.queue.retryDead(queue: h.name, ids: [id]) == 1)
        let requeued = try #require(try await h.job(id))
        #expect(requeued.status == .queued && requeued.attempt == 0)
        #expect(try await h.redis.send(["LRANGE", h.keys.pending, "0", "-1"]).array?.compactMap(\.string) == [id])
        #expect(try await h.redis.send(["PTTL", h.keys.job(id)]).int == -1)

        let again = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .failed) }
        #expect(again.attempt == 2)
        #expect(try await h.queue.purgeDead(queue: h.name) == 1)
        #expect(try await h.job(id) == nil)
        #expect(try await h.queue.stats(queue: h.name).dead == 0)
    }

    @Test func withoutMaxAttemptsTheJobTypesPolicyDecides() async throws {
        let h = try await QueueHarness("policy")
        var registry = JobHandlerRegistry()
        registry.register(
            "noop",
            JobRegistration(
                handler: NoopHandler(), retryPolicy: RetryPolicy(base: .milliseconds(10), cap: .milliseconds(20), maxAttempts: 2)))
        let id = try await h.enqueue("noop", payload: #"{"failTimes":5}"#)
        let job = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .failed) }
        #expect(job.maxAttempts == 0)
        #expect(job.attempt == 2)
    }

    @Test func handlersLogWithTheJobsMetadata() async throws {
        let h = try await QueueHarness("logmeta")
        var registry = JobHandlerRegistry()
        registry.register(
            "tell",
            JobRegistration(
                handler: ClosureHandler { job in
                    let logger = job.logger
                    return
                        "\"\(logger[metadataKey: "job"] ?? "")/\(logger[metadataKey: "type"] ?? "")/\(logger[metadataKey: "attempt"] ?? "")\""
                }))
        let id = try await h.enqueue("tell")
        let job = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .succeeded) }
        #expect(job.result == "\"\(id)/tell/1\"")
    }

    @Test func permanentFailuresGoDeadAtOnce() async throws {
        let h = try await QueueHarness("permanent")
        let id = try await h.enqueue("noop", payload: #"{"sleepMs":"soon"}"#)
        let job = try await h.whileRunning(h.worker()) { try await h.waitForStatus(id, .failed) }
        #expect(job.attempt == 1)
        #expect(job.lastError?.hasPrefix("invalidPayload") == true)
    }

    @Test func aHandlersRetryAfterIsHonoured() async throws {
        let h = try await QueueHarness("retryafter")
        var registry = JobHandlerRegistry()
        registry.register(
            "limited",
            JobRegistration(
                handler: ClosureHandler { job in
                    if job.attempt == 1 { throw JobFailure.retryable("rateLimited", "429", after: .seconds(30)) }
                    return nil
                }))
        let id = try await h.enqueue("limited")
        let job = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .retrying) }
        let failedAt = try #require(job.startedAt)
        let retryAt = try #require(job.retryAt)
        #expect(retryAt - failedAt >= 30_000 && retryAt - failedAt < 32_000)
        #expect(try await h.redis.send(["ZSCORE", h.keys.scheduled, id]).int == Int(retryAt))
    }

    @Test func slowAttemptsTimeOutAndRetry() async throws {
        let h = try await QueueHarness("timeout")
        var registry = JobHandlerRegistry()
        registry.register(
            "slow",
            JobRegistration(
                handler: ClosureHandler { job in
                    if job.attempt == 1 { try await Task.sleep(for: .seconds(30)) }
                    return #""fast""#
                },
                retryPolicy: RetryPolicy(base: .milliseconds(10), cap: .milliseconds(20)), timeout: .milliseconds(200)
            ))
        let id = try await h.enqueue("slow")
        let job = try await h.whileRunning(h.worker(registry: registry)) { try await h.waitForStatus(id, .succeeded) }
        #expect(job.attempt == 2)
        #expect(job.lastError?.hasPrefix("timeout") == true)
    }

    @Test func unknownJobTypesAreRetriedNotLost() async throws {
        let h = try await QueueHarness("unknown")
        let id = try await h.enqueue("from-the-future", maxAttempts: 1)
        let job = try await h.whileRunning(h.worker()) { try await h.waitForStatus(id, .failed) }
        #expect(job.lastError?.contains("no handler for job type 'from-the-future'") == true)
    }
}
