import DurationUnits
import Foundation
import Logging
import Metrics
import RedisClient
import Synchronization
import Tracing

/// Consumes one queue for one worker process with up to `concurrency` jobs at a time.
///
/// It claims with BLMOVE (or, with a backlog, the `claim` script, as many jobs as it has room
/// for) into its own active list, so a crash loses nothing: the reaper puts the list back.
/// Then it starts the claimed jobs with a lease, runs them as child tasks and records
/// outcomes through an `AckBatcher`. With a backlog it claims up to `prefetch` jobs more
/// than it has handler slots: they wait in claim order for a slot (`RunSlots`), so a
/// finished job's slot goes to the next at once rather than after a claim's round trips.
/// Its two connections are its own and follow the queue's slot to whichever Redis server
/// holds it.
public final class QueueConsumer: Sendable {
    public struct Settings: Sendable, Hashable {
        public var concurrency: Int
        /// How long one BLMOVE waits on the server before the loop looks around again.
        public var blockTimeout: Duration = .seconds(1)
        /// How often the consumer tells Redis it is alive.
        public var heartbeatInterval: Duration = .seconds(1)
        /// After this long without a heartbeat, any process may reap the consumer's jobs.
        public var heartbeatTTL: Duration = .seconds(5)
        /// The most jobs one `start` call claims.
        public var maxClaim = 64
        /// How many claimed jobs may wait for a handler slot while every slot is busy: started
        /// already, but for one on its last attempt, which a lost worker must not spend. Only a
        /// backlog fills them (a worker with no free slot never blocks to claim), and they
        /// wait at most for a slot of this process. `nil`: a quarter of `concurrency`, at most 16.
        public var prefetch: Int?

        public init(concurrency: Int) { self.concurrency = max(1, concurrency) }

        /// `prefetch`, or its default for `concurrency`.
        public var jobsAhead: Int { max(0, prefetch ?? min(16, (concurrency + 3) / 4)) }
    }

    public let queue: String
    /// Unique per process and queue: `host:pid:queue:random`, as registered in `consumers`.
    public let consumerID: String
    let settings: Settings
    let jobQueue: JobQueue
    let registry: JobHandlerRegistry
    let keys: QueueKeys
    let logger: Logger
    /// Room for claimed jobs not yet done: `concurrency + prefetch`. The fetch loop waits here.
    let gate: SlotGate
    /// Handler slots: `concurrency`. A claimed job waits here for its turn to run.
    let slots: RunSlots
    private let fetchConnection: RedisDedicatedConnection
    private let acks: AckBatcher
    private let timeouts = AttemptTimeouts()
    /// Whether a tracer was bootstrapped, as `run` found it (a process bootstraps its tracer
    /// before it runs its services, not always before it makes them).
    private let tracing = Atomic<Bool>(false)
    /// The start script's limit for jobs lost by crashed workers when the job names none:
    /// the most any registered type allows, so no type loses attempts it is owed.
    private let mostAttempts: Int
    /// The handler types' attempts, as `start` takes them (`type max` pairs): a job claimed
    /// ahead of a slot on its last attempt is not started until its slot comes.
    private let policies: String
    private let leaseCounter = Atomic<Int>(0)
    private let running = Atomic<Int>(0)
    /// This consumer's active list may hold jobs it does not run (a claim or heartbeat
    /// failed, a lease could not be checked, or a heartbeat TTL passed since the last check),
    /// and the check has not yet run to the end.
    private let orphansSuspected = Atomic<Bool>(false)
    /// Ids this consumer claimed and has not finished recording.
    /// Counted: a job reaped during a pause may be claimed again while the task of its first
    /// claim has yet to find that out and skip it.
    private let inFlight = Mutex<[String: Int]>([:])
    /// When the latest heartbeat that landed was sent (ns after `clockOrigin`), and how many
    /// times the gap between two that landed was long enough for a reaper to take this
    /// consumer's jobs: the process was paused, or Redis out of reach. `ContinuousClock` goes
    /// on while the host sleeps, as the reapers' wall clocks do.
    private let clockOrigin = ContinuousClock.now
    private let lastBeat = Atomic<Int64>(0)
    private let lapses = Atomic<Int>(0)

    public init(queue: String, settings: Settings, jobQueue: JobQueue, registry: JobHandlerRegistry, logger: Logger) {
        self.queue = queue
        self.settings = settings
        self.jobQueue = jobQueue
        self.registry = registry
        self.keys = jobQueue.configuration.keys(queue)
        let host = ProcessInfo.processInfo.hostName.prefix(32).filter { $0 != ":" && $0 != "{" && $0 != "}" }
        self.consumerID = "\(host):\(getpid()):\(queue):\(JobQueue.makeID().prefix(8))"
        var logger = logger
        logger[metadataKey: "queue"] = "\(queue)"
        self.logger = logger
        self.gate = SlotGate(capacity: settings.concurrency + settings.jobsAhead)
        self.slots = RunSlots(capacity: settings.concurrency)
        self.mostAttempts = registry.registrations.values.map(\.retryPolicy.maxAttempts)
            .reduce(jobQueue.configuration.defaultMaxAttempts, max)
        self.policies = registry.registrations.sorted { $0.key < $1.key }
            .map { "\($0.key) \($0.value.retryPolicy.maxAttempts)" }.joined(separator: " ")
        // Named after the consumer (`fetch-QUEUE-` and its id's last part), to find it in CLIENT LIST.
        self.fetchConnection = jobQueue.redis.makeDedicatedConnection(
            name: "fetch-\(queue)-\(consumerID.split(separator: ":").last ?? "")")
        self.acks = AckBatcher(
            connection: jobQueue.redis.makeDedicatedConnection(name: "ack-\(queue)"), keys: keys, consumer: consumerID,
            configuration: jobQueue.configuration, logger: logger
        )
    }

    /// Jobs running now.
    public var runningJobs: Int { running.load(ordering: .relaxed) }

    /// Stops claiming; `run` then waits for in-flight jobs up to its deadline.
    public func stopClaiming() {
        gate.stop()
        // Jobs claimed ahead and still waiting for a slot stay in the active list: the
        // give-back at the end requeues them with their attempt refunded.
        slots.stop()
    }

    /// Runs until `stopClaiming`, then drains for at most `shutdownTimeout` and gives back
    /// (requeues, attempt refunded) whatever is still running.
    public func run(shutdownTimeout: Duration) async {
        logger.info("consumer started", metadata: ["consumer": "\(consumerID)", "concurrency": "\(settings.concurrency)"])
        tracing.store(JobTracing.isOn, ordering: .relaxed)
        await heartbeat()
        // Heartbeats go on while running jobs drain, and end with them.
        let heartbeats = Task { await self.heartbeatLoop() }
        let deadlines = Task { await self.timeouts.watch() }
        await withDiscardingTaskGroup { group in
            while true {
                let room = await gate.take(upTo: settings.maxClaim)
                if room == 0 { break }
                let lapsesBefore = lapses.load(ordering: .relaxed)
                let jobs = await claim(upTo: room)
                gate.give(room - jobs.count)
                inFlight.withLock { ids in for job in jobs { ids[job.id, default: 0] += 1 } }
                for job in jobs {
                    // Its place is taken here, in claim order, before its task runs: the next
                    // claim then knows whether a slot is free.
                    let place = slots.reserve()
                    group.addTask {
                        var counted = true
                        defer { if counted { self.release(job.id) } }
                        guard await self.slots.wait(place) else {
                            // Stopped before its turn: it never ran, and the give-back requeues it.
                            self.gate.give()
                            return
                        }
                        var job = job
                        if !job.isStarted {
                            // Claimed ahead of its slot on its last attempt: started only now.
                            let (started, failed) = await self.startWaited(job)
                            guard let started else {
                                self.release(job.id)
                                counted = false
                                // Still in the active list: back to pending before the next claim.
                                if failed { self.orphansSuspected.store(true, ordering: .relaxed) }
                                self.slots.give()
                                self.gate.give()
                                return
                            }
                            job = started
                        } else if self.mayHaveBeenReaped(since: lapsesBefore), await !self.stillHolds(job) {
                            // Started (by this worker's call, or by the server as its BLMOVE
                            // unblocked) before a pause that may have outlasted its heartbeats: a
                            // reaper may have given it to another worker, and then this one must
                            // not run it.
                            self.release(job.id)
                            counted = false
                            // Anything else left in the active list goes back before the next claim.
                            self.orphansSuspected.store(true, ordering: .relaxed)
                            self.slots.give()
                            self.gate.give()
                            return
                        }
                        // The slot is free once the handler is done; recording the outcome
                        // (a round trip, batched) need not hold it. The id stays in the active
                        // list and in `inFlight` until it is recorded, and the group waits for
                        // the recording before a drained consumer gives anything back.
                        await self.execute(job) {
                            self.slots.give()
                            self.gate.give()
                        }
                    }
                }
            }
            let drained = await withTaskGroup(of: Bool.self) { race in
                race.addTask {
                    await self.gate.waitUntilIdle(); return true
                }
                race.addTask {
                    try? await Task.sleep(for: shutdownTimeout); return false
                }
                let first = await race.next() ?? false
                race.cancelAll()
                return first
            }
            if !drained {
                logger.warning("shutdown deadline reached; requeueing running jobs", metadata: ["running": "\(runningJobs)"])
                await giveBack()
                group.cancelAll()
            }
        }
        // Wait out a heartbeat in flight, or its ZADD could land after the deregistration.
        heartbeats.cancel()
        deadlines.cancel()
        await heartbeats.value
        await giveBack()
        logger.info("consumer stopped", metadata: ["consumer": "\(consumerID)"])
    }

    /// Requeues this consumer's active list (attempts refunded) and deregisters it.
    private func giveBack() async {
        do {
            let moved = try await jobQueue.release(consumer: consumerID, queue: queue, onlyIfExpired: false)
            if moved > 0 { logger.info("requeued unfinished jobs", metadata: ["jobs": "\(moved)"]) }
        } catch {
            logger.error("could not requeue on shutdown; the reaper will", metadata: ["error": "\(error)"])
        }
    }

    private func heartbeatLoop() async {
        var sinceSweep = Duration.zero
        while true {
            do {
                try await Task.sleep(for: settings.heartbeatInterval)
            } catch {
                return
            }
            await heartbeat()
            // Once a heartbeat TTL, this consumer's own active list is checked at the next
            // claim, failure seen or not: a write Redis confirmed and then lost (a failover to
            // a replica it had not reached) can put back in it a job this worker already let
            // go, and no reaper takes from a live consumer.
            sinceSweep += settings.heartbeatInterval
            if sinceSweep >= settings.heartbeatTTL {
                sinceSweep = .zero
                orphansSuspected.store(true, ordering: .relaxed)
            }
        }
    }

    private func heartbeat() async {
        // Taken before the deadline: a pause between the two cannot pass for a fresh beat.
        let sentAt = elapsedNanoseconds()
        do {
            try await jobQueue.redis.send(registration())
            beatLanded(sentAt: sentAt)
        } catch {
            logger.warning("heartbeat failed", metadata: ["error": "\(error)"])
            // Redis is failing or moving: its replies may have been lost too.
            orphansSuspected.store(true, ordering: .relaxed)
        }
    }

    /// The heartbeat: this consumer's deadline in `consumers`, from now.
    private func registration() -> [String] {
        ["ZADD", keys.consumers, String(JobQueue.nowMilliseconds() + settings.heartbeatTTL.milliseconds), consumerID]
    }

    /// Records a heartbeat sent at `sentAt` as landed, and a gap before it long enough for a
    /// reaper. A beat that lands after a later one (two callers) changes nothing.
    private func beatLanded(sentAt: Int64) {
        var previous = lastBeat.load(ordering: .relaxed)
        while sentAt > previous {
            let (exchanged, original) = lastBeat.compareExchange(expected: previous, desired: sentAt, ordering: .relaxed)
            if exchanged {
                if sentAt - previous > lapseThreshold { lapses.add(1, ordering: .relaxed) }
                return
            }
            previous = original
        }
    }

    /// One claim fewer of `id` in flight.
    private func release(_ id: String) {
        inFlight.withLock { ids in
            if let count = ids[id], count > 1 { ids[id] = count - 1 } else { ids[id] = nil }
        }
    }

    /// Half the heartbeat TTL: a gap this long between heartbeats (five a TTL, by default)
    /// means the consumer may have been reaped, with a reaper's clock ahead.
    private var lapseThreshold: Int64 { settings.heartbeatTTL.milliseconds * 500_000 }

    private func elapsedNanoseconds() -> Int64 {
        let elapsed = (ContinuousClock.now - clockOrigin).components
        return elapsed.seconds &* 1_000_000_000 &+ elapsed.attoseconds / 1_000_000_000
    }

    /// Whether a reaper may have taken this consumer's jobs since `lapsesBefore` was read:
    /// a heartbeat gap has been seen since, or the latest beat that landed is old.
    private func mayHaveBeenReaped(since lapsesBefore: Int) -> Bool {
        lapses.load(ordering: .relaxed) != lapsesBefore
            || elapsedNanoseconds() - lastBeat.load(ordering: .relaxed) > lapseThreshold
    }

    /// Whether this consumer still holds `job`'s lease. The registration is renewed first in
    /// the same round trip (one slot, in order), so no reaper can take the job between the
    /// answer and the run: `release` takes only from a consumer whose deadline has passed.
    /// Asked up to three times; a lease not known after them counts as lost, and the job is
    /// not run: its lease fences off only its outcome, not what its handler does, and the
    /// caller puts a job still listed as this consumer's back in pending, its attempt given
    /// back (a run elsewhere is never doubled, a job nobody took is run later).
    private func stillHolds(_ job: ClaimedJob) async -> Bool {
        var failure = ""
        for attempt in 1...3 {
            if attempt > 1 { try? await Task.sleep(for: .milliseconds(100 * (attempt - 1))) }
            let sentAt = elapsedNanoseconds()
            do {
                let replies = try await jobQueue.redis.pipeline([registration(), ["HGET", keys.job(job.id), "lease"]])
                if let error = replies.first(where: { if case .error = $0 { true } else { false } }) {
                    failure = "\(error)"
                    continue
                }
                beatLanded(sentAt: sentAt)
                if replies[1].string == job.lease { return true }
                logger.notice("a job of this worker was reaped while the worker was paused; not running it", metadata: ["job": "\(job.id)"])
                return false
            } catch {
                failure = "\(error)"
            }
        }
        logger.warning(
            "could not check the lease after a pause; not running the job (it goes back to pending unless it was reaped)",
            metadata: ["job": "\(job.id)", "error": "\(failure)"])
        return false
    }

    // MARK: Claiming

    struct ClaimedJob: Sendable {
        var id, type, payload, lease: String
        var attempt, maxAttempts: Int
        var enqueuedAt: Int64
        /// The enqueuing span's W3C traceparent ('' = none).
        var traceparent = ""
        /// When this attempt became due: a retry's time, else `enqueuedAt` (ms since 1970).
        var dueAt: Int64 = 0

        /// Whether `start` started it: a job claimed ahead on its last attempt (attempt 0,
        /// `lease` its mark) is started when its slot comes.
        var isStarted: Bool { attempt > 0 }
    }

    /// Claims up to `limit` jobs: at once when there is a backlog, else, when a handler slot
    /// is free, blocks in BLMOVE for up to `blockTimeout`; with every slot busy it waits for
    /// one instead (a job claimed then would only wait here while another worker is idle).
    /// Returns no jobs on a timeout or a Redis failure.
    private func claim(upTo limit: Int) async -> [ClaimedJob] {
        // An orphan check that failed (Redis was down) is made again before the next claim:
        // otherwise its orphans would wait for the next failure, in a live consumer's list
        // that no reaper takes.
        if orphansSuspected.load(ordering: .relaxed) { await requeueOrphans() }
        do {
            let claimed =
                try await fetchConnection.run(
                    QueueScripts.claim, keys: [keys.pending, keys.active(consumerID)], arguments: [String(limit)]
                ).array?.compactMap(\.string) ?? []
            if !claimed.isEmpty { return try await start(claimed, slots: slots.freeCount) }
            if gate.isStopped { return [] }
            if !slots.hasFree {
                await slots.waitUntilFree()
                return []
            }
            // The start goes in the same write: the server runs it as the BLMOVE unblocks.
            let lease = nextLease()
            let (moved, started) = try await fetchConnection.send(
                ["BLMOVE", keys.pending, keys.active(consumerID), "RIGHT", "LEFT", String(settings.blockTimeout.seconds)],
                thenRun: QueueScripts.startClaimed, keys: [keys.active(consumerID), keys.dead, keys.stats],
                arguments: startArguments(lease) + [keys.jobPrefix],
                timeout: settings.blockTimeout + jobQueue.redis.configuration.commandTimeout
            )
            let jobs = (try? started.get()).map { Self.claimedJobs($0, lease: lease) } ?? []
            guard let id = moved.string else { return jobs }
            if jobs.map(\.id) == [id] { return jobs }
            // The script failed (a slot on the move refuses a key it did not declare) or started
            // another job (the BLMOVE was sent again after it ran): `start` starts the moved one,
            // and the next claim puts back a job started and not run.
            if !jobs.isEmpty { orphansSuspected.store(true, ordering: .relaxed) }
            if case .failure(let error) = started {
                logger.debug("the start sent with the claim failed; starting apart", metadata: ["error": "\(error)"])
            }
            return try await start([id], slots: 1)
        } catch {
            logger.warning("claiming failed; backing off", metadata: ["error": "\(error)"])
            orphansSuspected.store(true, ordering: .relaxed)
            try? await Task.sleep(for: .milliseconds(200))
            await requeueOrphans()
            return []
        }
    }

    /// After a failed claim, Redis may have moved or started jobs whose reply never came (and
    /// after a failover, an ack it confirmed may be lost, its job back as it ran):
    /// they sit in this consumer's active list with nobody running them, and the reaper
    /// leaves a live consumer alone. Put them back. Only the fetch loop claims, so while it
    /// is here no new id can appear that is not yet in `inFlight`. The suspicion is cleared
    /// before the list is read: a task that lets go of its job meanwhile (a lease it could
    /// not check) raises it again, and its job goes back at the next claim.
    private func requeueOrphans() async {
        orphansSuspected.store(false, ordering: .relaxed)
        do {
            let listed = try await fetchConnection.send(["LRANGE", keys.active(consumerID), "0", "-1"]).array?.compactMap(\.string) ?? []
            let running = inFlight.withLock { Set($0.keys) }
            let orphans = listed.filter { !running.contains($0) }
            if !orphans.isEmpty {
                let moved =
                    try await fetchConnection.run(
                        QueueScripts.requeueOrphans, keys: [keys.active(consumerID), keys.pending] + orphans.map(keys.job),
                        arguments: orphans
                    ).int ?? 0
                if moved > 0 {
                    logger.notice("requeued jobs this worker does not run from its active list", metadata: ["jobs": "\(moved)"])
                }
            }
        } catch {
            orphansSuspected.store(true, ordering: .relaxed)
            logger.warning("could not check for lost claims; will before the next claim", metadata: ["error": "\(error)"])
        }
    }

    /// Gives claimed ids a lease; the script skips any that left this consumer's active list.
    /// The first `slots` have a handler slot; of the rest, claimed ahead, those on their last
    /// attempt come back not started (`ClaimedJob.isStarted`).
    private func start(_ ids: [String], slots: Int) async throws -> [ClaimedJob] {
        let lease = nextLease()
        let reply = try await fetchConnection.run(
            QueueScripts.start, keys: [keys.active(consumerID), keys.dead, keys.stats] + ids.map(keys.job),
            arguments: startArguments(lease) + [String(slots), policies] + ids)
        return Self.claimedJobs(reply, lease: lease)
    }

    /// Starts a job claimed ahead and not started (its last attempt) now that its slot has
    /// come, if it still holds the mark `start` left (its lease then). No job when it is no
    /// longer this claim's (reaped, claimed again, or its record gone), or when Redis
    /// `failed` (the id may still be in the active list).
    private func startWaited(_ job: ClaimedJob) async -> (job: ClaimedJob?, failed: Bool) {
        let lease = nextLease()
        do {
            // Through the pool: the fetch connection may be blocked in BLMOVE.
            let reply = try await jobQueue.redis.run(
                QueueScripts.startWaited, keys: [keys.active(consumerID), keys.dead, keys.stats, keys.job(job.id)],
                arguments: startArguments(lease) + [job.lease, job.id])
            return (Self.claimedJobs(reply, lease: lease).first { $0.id == job.id && $0.isStarted }, false)
        } catch {
            logger.warning("could not start a job claimed ahead; it goes back to pending", metadata: ["error": "\(error)"])
            return (nil, true)
        }
    }

    /// A lease of this consumer's not given before.
    private func nextLease() -> String { "\(consumerID):\(leaseCounter.add(1, ordering: .relaxed).newValue)" }

    /// The first five arguments of `start`, `startClaimed` and `startWaited`.
    private func startArguments(_ lease: String) -> [String] {
        [
            String(JobQueue.nowMilliseconds()), lease, String(mostAttempts), String(jobQueue.configuration.deadTTL.milliseconds),
            keys.finished,
        ]
    }

    /// The jobs a `start` or `startClaimed` reply started, under `lease`.
    private static func claimedJobs(_ reply: RedisReply, lease: String) -> [ClaimedJob] {
        let values = reply.array ?? []
        var jobs: [ClaimedJob] = []
        jobs.reserveCapacity(values.count / 8)
        var index = 0
        while index + 7 < values.count {
            let enqueuedAt = Int64(values[index + 5].int ?? 0)
            jobs.append(
                ClaimedJob(
                    id: values[index].string ?? "", type: values[index + 1].string ?? "", payload: values[index + 2].string ?? "{}",
                    lease: lease, attempt: values[index + 3].int ?? 1, maxAttempts: values[index + 4].int ?? 1,
                    enqueuedAt: enqueuedAt, traceparent: values[index + 6].string ?? "",
                    dueAt: values[index + 7].int.map(Int64.init) ?? enqueuedAt
                ))
            index += 8
        }
        return jobs
    }

    // MARK: Running

    /// Runs the job and records its outcome; `handlerDone` is called once, between the two.
    private func execute(_ job: ClaimedJob, handlerDone: () -> Void) async {
        running.add(1, ordering: .relaxed)
        defer { running.subtract(1, ordering: .relaxed) }
        let registration = registry[job.type]
        let metrics = QueueMetrics.shared.forJob(queue: queue, type: registration == nil ? "unregistered" : job.type)
        // Passed to each log call, so it is only built when a line is actually logged.
        func metadata(_ extra: Logger.Metadata = [:]) -> Logger.Metadata {
            JobContext.metadata(id: job.id, type: job.type, attempt: job.attempt).merging(extra) { $1 }
        }
        let startedAt = JobQueue.nowMilliseconds()
        metrics.started.increment()
        metrics.waitTime.recordMilliseconds(max(0, startedAt - job.enqueuedAt))
        let clock = ContinuousClock()
        let began = clock.now
        // The job's spans descend from the span that enqueued it (its traceparent), in
        // whichever process that was: this attempt's wait from when it became due (enqueued,
        // or the retry's time) to this pickup, then the attempt, with the handler inside. A
        // job enqueued outside any trace starts one.
        // With tracing off (no tracer bootstrapped) no span is made at all: a no-op span
        // still costs its name, its context and a task-local, a few percent of a no-op job.
        let tracing = self.tracing.load(ordering: .relaxed)
        let parent = tracing ? JobTracing.parentContext(traceparent: job.traceparent) : .topLevel
        // Between 1970 and now: a record's time cannot make a span's arithmetic overflow.
        let dueAt = min(max(job.dueAt, 0), startedAt)
        if tracing, !job.traceparent.isEmpty {
            let waitSpan = startSpan(
                "job.wait \(job.type)", at: JobTracing.instant(millisecondsSinceEpoch: dueAt), context: parent, ofKind: .internal)
            if waitSpan.isRecording {
                waitSpan.attributes = JobTracing.attributes(type: job.type, queue: queue, id: job.id, attempt: job.attempt)
            }
            waitSpan.end(at: JobTracing.instant(millisecondsSinceEpoch: startedAt))
        }
        let attemptSpan = tracing ? startSpan("job.attempt \(job.type)", context: parent, ofKind: .consumer) : nil
        if let attemptSpan, attemptSpan.isRecording {
            var attributes = JobTracing.attributes(type: job.type, queue: queue, id: job.id, attempt: job.attempt)
            attributes["messaging.operation.type"] = "process"
            attributes["entitle.job.wait_ms"] = startedAt - dueAt
            attemptSpan.attributes = attributes
        }
        defer { attemptSpan?.end() }

        var outcome = AckBatcher.Outcome(id: job.id, lease: job.lease, type: job.type, kind: .ok, data: "null")
        let policy = registration?.retryPolicy ?? RetryPolicy(maxAttempts: jobQueue.configuration.defaultMaxAttempts)
        // 0 on the job: its type's policy decides.
        let maxAttempts = job.maxAttempts > 0 ? job.maxAttempts : policy.maxAttempts
        var failureCode: String?
        do {
            guard let registration else {
                throw JobFailure.retryable("unknownJobType", "this worker has no handler for job type '\(job.type)'")
            }
            let context = JobContext(
                id: job.id, type: job.type, queue: queue, payload: job.payload, attempt: job.attempt,
                maxAttempts: maxAttempts, redis: jobQueue.redis, keys: keys, baseLogger: logger
            )
            let handle = { try await self.timeouts.run(timeout: registration.timeout) { try await registration.handler.handle(context) } }
            if let attemptSpan {
                outcome.data =
                    try await JobTracing.withSpan("job.handler \(job.type)", context: attemptSpan.context) { span in
                        if span.isRecording { span.attributes = JobTracing.attributes(type: job.type, queue: queue, id: job.id) }
                        return try await handle()
                    } ?? "null"
            } else {
                outcome.data = try await handle() ?? "null"
            }
            if jobQueue.configuration.hashFormat.packsResults {
                (outcome.data, outcome.packed) = StoredResult.stored(outcome.data)
            } else {
                outcome.data = StoredResult.unambiguous(outcome.data)
            }
        } catch {
            let failure =
                (error as? JobFailure)
                ?? (error is CancellationError
                    ? .retryable("interrupted", "the attempt was cancelled")
                    : .retryable("error", String(describing: error)))
            outcome.data = failure.description
            failureCode = failure.code
            if failure.isDeferral {
                outcome.kind = .deferred
                outcome.retryAt = JobQueue.nowMilliseconds() + (failure.retryAfter ?? .seconds(1)).milliseconds
                logger.debug("job deferred", metadata: metadata(["reason": "\(failure.code)"]))
            } else if failure.isRetryable && job.attempt < maxAttempts {
                var generator = SystemRandomNumberGenerator()
                let delay = failure.retryAfter ?? policy.delay(afterAttempt: job.attempt, using: &generator)
                outcome.kind = .retry
                outcome.retryAt = JobQueue.nowMilliseconds() + delay.milliseconds
                logger.notice(
                    "job failed; will retry", metadata: metadata(["error": "\(failure.code)", "retryInMs": "\(delay.milliseconds)"]))
            } else {
                outcome.kind = .dead
                logger.error("job failed for good", metadata: metadata(["error": "\(failure.code)"]))
            }
        }
        metrics.runTime.record(duration: clock.now - began)
        handlerDone()
        let recorded = await acks.record(outcome)
        attemptSpan?.attributes["entitle.job.outcome"] = recorded ? outcome.kind.spanValue : "fenced"
        attemptSpan?.attributes["entitle.job.max_attempts"] = maxAttempts
        if outcome.kind != .ok {
            // The failure's code only: its message can carry URLs and other text no span should.
            attemptSpan?.attributes["error.type"] = failureCode
            if outcome.kind == .retry || outcome.kind == .dead { attemptSpan?.setStatus(SpanStatus(code: .error)) }
        }
        guard recorded else {
            metrics.fenced.increment()
            logger.warning("lease lost before the job finished; its outcome was not recorded", metadata: metadata())
            return
        }
        switch outcome.kind {
        case .ok: metrics.succeeded.increment()
        case .retry: metrics.retried.increment()
        case .deferred: metrics.deferred.increment()
        case .dead: metrics.dead.increment()
        }
    }
}

extension AckBatcher.Outcome.Kind {
    /// How an attempt ended, as its span says (`entitle.job.outcome`).
    var spanValue: String {
        switch self {
        case .ok: "succeeded"
        case .retry: "retry"
        case .deferred: "deferred"
        case .dead: "dead"
        }
    }
}

extension Metrics.Timer {
    func recordMilliseconds(_ milliseconds: Int64) { recordNanoseconds(milliseconds * 1_000_000) }
}

extension Metrics.Timer {
    func record(duration: Duration) {
        recordNanoseconds(duration.nanoseconds)
    }
}
