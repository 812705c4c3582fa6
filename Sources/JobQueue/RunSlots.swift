import Synchronization

/// A consumer's handler slots, handed out first come, first served. Jobs claimed ahead of a
/// free slot wait here in the order they were claimed; a finished job hands its slot straight
/// to the longest waiter, so no Redis round trip sits between one job's end and the next's
/// start.
final class RunSlots: Sendable {
    private struct State {
        var free: Int
        var stopped = false
        var waiters: [CheckedContinuation<Bool, Never>] = []
        var freeWaiter: CheckedContinuation<Void, Never>?
    }

    let capacity: Int
    private let state: Mutex<State>

    init(capacity: Int) {
        self.capacity = capacity
        self.state = Mutex(State(free: capacity))
    }

    /// Waits for a slot. Returns false, holding none, once stopped.
    func take() async -> Bool {
        let now: Bool? = state.withLock { state in
            if state.stopped { return false }
            guard state.free > 0 else { return nil }
            state.free -= 1
            return true
        }
        if let now { return now }
        return await withCheckedContinuation { continuation in
            let resumeWith: Bool? = state.withLock { state in
                if state.stopped { return false }
                if state.free > 0 {
                    state.free -= 1
                    return true
                }
                state.waiters.append(continuation)
                return nil
            }
            if let resumeWith { continuation.resume(returning: resumeWith) }
        }
    }

    /// Gives a slot back: to the longest waiter if there is one, else to the free count.
    func give() {
        let (next, freed) = state.withLock { state -> (CheckedContinuation<Bool, Never>?, CheckedContinuation<Void, Never>?) in
            if !state.stopped, !state.waiters.isEmpty { return (state.waiters.removeFirst(), nil) }
            state.free += 1
            defer { state.freeWaiter = nil }
            return (nil, state.freeWaiter)
        }
        next?.resume(returning: true)
        freed?.resume()
    }

    /// Whether a slot is free now (and so nobody waits for one).
    var hasFree: Bool { state.withLock { $0.free > 0 } }

    /// Returns once a slot is free or the slots stopped. One caller at a time (the fetch loop).
    func waitUntilFree() async {
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state in
                if state.stopped || state.free > 0 { return true }
                state.freeWaiter = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Stops handing out slots: every waiter, now and later, gets none.
    func stop() {
        let (waiters, freeWaiter) = state.withLock { state in
            state.stopped = true
            defer {
                state.waiters = []
                state.freeWaiter = nil
            }
            return (state.waiters, state.freeWaiter)
        }
        for waiter in waiters { waiter.resume(returning: false) }
        freeWaiter?.resume()
    }
}
