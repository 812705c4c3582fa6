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
        /// Attempts cancelled for their deadline, until their `run` has seen it.
        var expired: Set<Int> = []
    }

    private let state = Mutex(State())
    private let clock = ContinuousClock()
    let tick: Duration

    init(tick: Duration = .milliseconds(50)) { self.tick = tick }

    /// Runs `operation` in a task of its own, cancelled when it runs past `timeout` or when
    /// the caller is cancelled. An attempt that ran past its deadline throws the retryable
    /// `timeout` failure once it has stopped, whatever it returned.
    func run<Value: Sendable>(timeout: Duration, _ operation: @escaping @Sendable () async throws -> Value) async throws -> Value {
        let task = Task { try await operation() }
        let deadline = clock.now.advanced(by: timeout)
        let ticket = state.withLock { state in
            state.lastTicket &+= 1
            state.watched[state.lastTicket] = Watched(deadline: deadline, cancel: { task.cancel() })
            return state.lastTicket
        }
        let result = await withTaskCancellationHandler {
            await task.result
        } onCancel: {
            task.cancel()
        }
        let timedOut = state.withLock { state in
            state.watched[ticket] = nil
            return state.expired.remove(ticket) != nil
        }
        if timedOut { throw JobFailure.retryable("timeout", "the attempt ran longer than \(timeout)") }
        return try result.get()
    }

    /// Cancels the attempts past their deadline every `tick`, until the calling task is
    /// cancelled.
    func watch() async {
        while !Task.isCancelled {
            let now = clock.now
            let due = state.withLock { state in
                let due = state.watched.filter { $0.value.deadline <= now }
                for ticket in due.keys {
                    state.watched[ticket] = nil
                    state.expired.insert(ticket)
                }
                return due.values.map(\.cancel)
            }
            // Outside the lock: a cancelled task runs its cancellation handlers here.
            for cancel in due { cancel() }
            try? await Task.sleep(for: tick)
        }
    }
}
