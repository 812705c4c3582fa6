import Synchronization

/// Counts a consumer's free handler slots. The fetch loop waits here for room; finished
/// jobs give their slot back; shutdown waits here for the last job.
final class SlotGate: Sendable {
    private struct State {
        var free: Int
        var stopped = false
        var roomWaiter: CheckedContinuation<Void, Never>?
        var idleWaiter: CheckedContinuation<Void, Never>?
    }

    let capacity: Int
    private let state: Mutex<State>

    init(capacity: Int) {
        self.capacity = capacity
        self.state = Mutex(State(free: capacity))
    }

    /// Waits until at least one slot is free (or the gate stops), then takes up to `limit`
    /// free slots. Returns 0 once stopped.
    func take(upTo limit: Int) async -> Int {
        while true {
            let taken: Int? = state.withLock { state in
                if state.stopped { return 0 }
                guard state.free > 0 else { return nil }
                let n = min(limit, state.free)
                state.free -= n
                return n
            }
            if let taken { return taken }
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    if state.stopped || state.free > 0 { return true }
                    state.roomWaiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
    }

    /// Gives slots back (finished jobs, or claimed fewer than taken).
    func give(_ count: Int = 1) {
        guard count > 0 else { return }
        let (room, idle) = state.withLock { state -> (CheckedContinuation<Void, Never>?, CheckedContinuation<Void, Never>?) in
            state.free += count
            let room = state.roomWaiter
            state.roomWaiter = nil
            var idle: CheckedContinuation<Void, Never>?
            if state.free == capacity {
                idle = state.idleWaiter
                state.idleWaiter = nil
            }
            return (room, idle)
        }
        room?.resume()
        idle?.resume()
    }

    /// Stops handing out slots; a waiting `take` returns 0.
    func stop() {
        let room = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.stopped = true
            defer { state.roomWaiter = nil }
            return state.roomWaiter
        }
        room?.resume()
    }

    var isStopped: Bool { state.withLock { $0.stopped } }

    /// Returns when every slot is free, or when the task is cancelled.
    func waitUntilIdle() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    if state.free == capacity || Task.isCancelled { return true }
                    state.idleWaiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.idleWaiter = nil }
                return state.idleWaiter
            }
            waiter?.resume()
        }
    }
}
