import Synchronization

/// Ends a consumer's handler attempts that run past their type's timeout. One task looks
/// over the running attempts' deadlines every `tick`: a timer per attempt armed and cancelled
/// a dispatch timer for every job, waking dispatch's manager thread each time, which was
/// about a fifth of a no-op job's CPU. An attempt is cancelled at most `tick` after its
/// deadline.
final class AttemptTimeouts: Sendable {
    private struct Watched: Sendable {
        let deadline: ContinuousClock.Instant
        let cancel: @Sendable () -> Void
    }

    private struct State: Sendable {
        var lastTicket = 0
        var watched: [Int: Watched] = [:]
    }

    private let state = Mutex(State())
    private let clock = ContinuousClock()
    let tick: Duration

    init(tick: Duration = .milliseconds(50)) { self.tick = tick }

    /// Runs `operation` in a task of its own, cancelled when it runs past `timeout` or when
    /// the caller is cancelled. An attempt that ended after its deadline throws the retryable
    /// `timeout` failure, whatever it returned; one that ended before it keeps its answer,
    /// however late its caller resumes.
    func run<Value: Sendable>(timeout: Duration, _ operation: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let deadline = clock.now.advanced(by: timeout)
        let task = Task { () async -> (Result<Value, any Error>, ContinuousClock.Instant) in
            let result: Result<Value, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            return (result, ContinuousClock.now)
        }
        let ticket = state.withLock { state in
            state.lastTicket &+= 1
            state.watched[state.lastTicket] = Watched(deadline: deadline, cancel: { task.cancel() })
            return state.lastTicket
        }
        let (result, ended) = await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
        _ = state.withLock { $0.watched.removeValue(forKey: ticket) }
        if ended > deadline { throw JobFailure.retryable("timeout", "the attempt ran longer than \(timeout)") }
        return try result.get()
    }

    /// Attempts watched (none once every `run` has returned).
    var unsettled: Int { state.withLock { $0.watched.count } }

    /// Cancels the attempts past their deadline every `tick`, until the calling task is
    /// cancelled.
    func watch() async {
        while !Task.isCancelled {
            let now = clock.now
            let due = state.withLock { state in
                let due = state.watched.filter { $0.value.deadline <= now }
                for ticket in due.keys { state.watched[ticket] = nil }
                return due.values.map(\.cancel)
            }
            // Outside the lock: a cancelled task runs its cancellation handlers here.
            for cancel in due { cancel() }
            try? await Task.sleep(for: tick)
        }
    }
}
