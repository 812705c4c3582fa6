import DurationUnits
import Logging
import RedisClient
import Synchronization

/// Waits for jobs to end, woken by the worker that ended them: a long-poll costs Redis two
/// calls (mark the job as waited for, read its record at the end), not a read every few
/// milliseconds.
///
/// Each process holds one sharded subscription per queue it waits on, to the queue's
/// `finished` channel (`RedisSubscription`: the queue's slot, so it works alike on one
/// server, behind Sentinel and on a cluster). `watch` marks a job as waited for; `finish`
/// publishes the id of a marked job when it succeeds or goes dead. Messages are lost while
/// a subscription is away (a failover, a dropped connection), and so may be a mark not yet
/// replicated when its primary failed: each (re)subscription marks every job waited on in
/// this process again and wakes those that ended meanwhile, and so does a sweep every
/// `sweepInterval` (30 s) while anyone waits (a mark lost without the subscription dropping; workers of an
/// older version, which publish nothing). Where the server refuses to subscribe (Redis before
/// 7, an ACL without the channel), the sweep runs four times a second instead.
public final class JobWaiter: Sendable {
    private let jobQueue: JobQueue
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var subscriptions: [String: (subscription: RedisSubscription, listener: Task<Void, Never>, sweeper: Task<Void, Never>)] = [:]
        /// Queues whose subscription the server refuses now.
        var refused: Set<String> = []
        /// Queue -> job id -> the signals of the callers waiting for it.
        var waiting: [String: [String: [Int: WakeSignal]]] = [:]
        var nextWaiter = 0
        var closed = false
        /// How many catch-ups (`lookAgain`) have ended: the tests await the first.
        var lookedAgain = 0
    }

    /// How often the jobs waited on are marked and read again while subscribed.
    public let sweepInterval: Duration

    /// - Parameter sweepInterval: how often, while subscribed, the jobs waited on are marked and
    ///   read again (30 s: 1,000 waiters cost about 33 commands a second).
    public init(jobQueue: JobQueue, sweepInterval: Duration = .seconds(30), logger: Logger) {
        self.jobQueue = jobQueue
        self.sweepInterval = sweepInterval
        self.logger = logger
    }

    deinit { close() }

    /// Ends every subscription; callers waiting now wait out their timeout.
    public func close() {
        let subscriptions = state.withLock { state in
            state.closed = true
            defer { state.subscriptions = [:] }
            return Array(state.subscriptions.values)
        }
        for (subscription, listener, sweeper) in subscriptions {
            subscription.close()
            listener.cancel()
            sweeper.cancel()
        }
    }

    /// The job's record once it has ended (succeeded or failed), or as it is when `timeout`
    /// (a day at most) has passed; `nil` when there is no such job in `queue`.
    public func wait(for id: String, queue: String, timeout: Duration) async throws -> JobRecord? {
        // A day at most: a far deadline cannot overflow the clock's arithmetic.
        let timeout = min(timeout, .seconds(86_400))
        let deadline = ContinuousClock.now + timeout
        let keys = jobQueue.configuration.keys(queue)
        // No time to wait, or no subscription to wait on: the record as it is.
        guard timeout > .zero, let (waiter, signal) = register(id, queue: queue) else {
            return try await Self.retrying { try await jobQueue.job(id: id, queue: queue) }
        }
        defer { unregister(id, queue: queue, waiter: waiter) }
        let status = try await Self.retrying {
            try await jobQueue.redis.run(QueueScripts.watch, keys: [keys.job(id)], arguments: []).string
        }
        guard let status else { return nil }
        if JobStatus(rawValue: status)?.isFinished ?? false {
            return try await Self.retrying { try await jobQueue.job(id: id, queue: queue) }
        }
        while true {
            let remaining = deadline - .now
            if remaining > .zero { await signal.wait(upTo: remaining) }
            let record = try await Self.retrying { try await jobQueue.job(id: id, queue: queue) }
            // Woken for another job's end (another deployment on the same server shares the
            // channel name: pub/sub ignores SELECT): wait on.
            guard let record, !record.status.isFinished, deadline > .now, !Task.isCancelled else { return record }
        }
    }

    /// How many times the jobs waited on were marked and read again after a (re)subscription or
    /// a sweep (for the tests: a catch-up still under way sends Redis a command per job).
    var catchUps: Int { state.withLock { $0.lookedAgain } }

    /// How many callers wait now (for the tests and metrics).
    public var waitingCount: Int {
        state.withLock { $0.waiting.values.reduce(0) { $0 + $1.values.reduce(0) { $0 + $1.count } } }
    }

    // MARK: Waiters

    private func register(_ id: String, queue: String) -> (Int, WakeSignal)? {
        let signal = WakeSignal()
        let (waiter, start): (Int?, Bool) = state.withLock { state in
            guard !state.closed else { return (nil, false) }
            state.nextWaiter += 1
            state.waiting[queue, default: [:]][id, default: [:]][state.nextWaiter] = signal
            return (state.nextWaiter, state.subscriptions[queue] == nil)
        }
        guard let waiter else { return nil }
        if start { subscribe(queue) }
        return (waiter, signal)
    }

    private func unregister(_ id: String, queue: String, waiter: Int) {
        state.withLock { state in
            state.waiting[queue]?[id]?[waiter] = nil
            if state.waiting[queue]?[id]?.isEmpty == true { state.waiting[queue]?[id] = nil }
        }
    }

    private func wake(_ id: String, queue: String) {
        let signals = state.withLock { $0.waiting[queue]?[id].map { Array($0.values) } ?? [] }
        for signal in signals { signal.fire() }
    }

    // MARK: The subscription

    private func subscribe(_ queue: String) {
        let keys = jobQueue.configuration.keys(queue)
        state.withLock { state in
            guard !state.closed, state.subscriptions[queue] == nil else { return }
            let subscription = jobQueue.redis.subscribe(channel: keys.finished, name: "waiter-\(queue)")
            // The tasks hold the waiter weakly: a waiter nobody holds ends its subscriptions.
            let listener = Task { [weak self] in
                for await event in subscription.events {
                    guard let self else { return }
                    switch event {
                    case .message(let bytes): wake(String(decoding: bytes, as: UTF8.self), queue: queue)
                    case .subscribed:
                        self.state.withLock { _ = $0.refused.remove(queue) }
                        await lookAgain(queue)
                    case .refused: self.state.withLock { _ = $0.refused.insert(queue) }
                    }
                }
            }
            let sweeper = Task { [weak self] in
                var last = ContinuousClock.now
                while !Task.isCancelled {
                    try? await Task.sleep(for: Self.refusedSweep)
                    guard let self else { return }
                    let (refused, waiting) = self.state.withLock { ($0.refused.contains(queue), !($0.waiting[queue]?.isEmpty ?? true)) }
                    guard waiting, refused || ContinuousClock.now - last >= self.sweepInterval else { continue }
                    last = ContinuousClock.now
                    await lookAgain(queue)
                }
            }
            state.subscriptions[queue] = (subscription, listener, sweeper)
        }
    }

    /// A waiter's call to Redis (a read, or the watch mark: each may run twice), made again up
    /// to twice when it failed in a way another try may not: right after a failover the pool
    /// may still hold connections to the old primary, and each fails its first call and is
    /// dropped. After a timeout only with `timeouts` (the catch-up, which has no deadline): a
    /// caller's wait would stretch by the command's.
    static func retrying<T>(timeouts: Bool = false, _ call: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await call()
            } catch let error as RedisError
                where error.isRetryable && error.code != .poolClosed && (timeouts || error.code != .timeout) && attempt < 3
            {
                try await Task.sleep(for: .milliseconds(100 * attempt))
                attempt += 1
            }
        }
    }

    /// How often the jobs waited on are marked and read again while the server refuses the
    /// subscription (and how often the sweeper looks whether a sweep is due).
    static let refusedSweep = Duration.milliseconds(250)

    /// After a (re)subscription: marks every job waited on here again (a failover may have
    /// lost a mark that was not replicated yet) and wakes the callers whose jobs ended while
    /// nobody listened.
    private func lookAgain(_ queue: String) async {
        defer { state.withLock { $0.lookedAgain += 1 } }
        let ids = state.withLock { state in state.waiting[queue].map { Array($0.keys) } ?? [] }
        guard !ids.isEmpty else { return }
        let keys = jobQueue.configuration.keys(queue)
        for start in stride(from: 0, to: ids.count, by: 1000) {
            let chunk = Array(ids[start..<min(ids.count, start + 1000)])
            do {
                let replies = try await Self.retrying(timeouts: true) {
                    try await jobQueue.redis.runPipelined(QueueScripts.watch, calls: chunk.map { ([keys.job($0)], []) })
                }
                for (id, reply) in zip(chunk, replies) {
                    guard case .success(let status) = reply else { continue }
                    if status.string.flatMap(JobStatus.init(rawValue:))?.isFinished ?? true { wake(id, queue: queue) }
                }
            } catch is CancellationError {
                return
            } catch {
                // Those callers still wake at their timeout, reading the record then.
                logger.warning("could not mark the jobs waited on after subscribing", metadata: ["queue": "\(queue)", "error": "\(error)"])
            }
        }
    }
}

/// A wake-up: `fire` releases the `wait` under way, or the next one if none is.
final class WakeSignal: Sendable {
    private let state = Mutex<(fired: Bool, continuation: CheckedContinuation<Void, Never>?)>((false, nil))

    func fire() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let continuation = state.continuation else {
                state.fired = true
                return nil
            }
            state.continuation = nil
            return continuation
        }
        continuation?.resume()
    }

    /// Returns once fired (a fire since the last wait counts), or when `timeout` has passed,
    /// or when the task is cancelled.
    func wait(upTo timeout: Duration) async {
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            self?.fire()
        }
        defer { timer.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state -> Bool in
                    if state.fired {
                        state.fired = false
                        return true
                    }
                    state.continuation = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            fire()
        }
        // A timer that fired as the wait ended must not count for the next wait.
        timer.cancel()
        state.withLock { $0.fired = false }
    }
}
