import Synchronization

/// A consumer's handler slots, handed out in the order jobs were claimed. The fetch loop
/// reserves a place for each claimed job before it starts the job's task (so what is free is
/// known at once, whenever the tasks get to run); a job whose place is not yet a slot waits
/// for one, and a finished job hands its slot straight to the longest waiting place. No Redis
/// round trip sits between one job's end and the next's start.
final class RunSlots: Sendable {
    /// A job's place: a slot already, or a number in the line.
    enum Place: Sendable, Equatable {
        case slot
        case line(Int)
        /// The slots have stopped: the job must not run.
        case refused
    }

    private struct State {
        var free: Int
        var stopped = false
        var nextNumber = 0
        /// Numbers waiting for a slot, first first.
        var line: [Int] = []
        /// Numbers given a slot before their task asked.
        var granted: Set<Int> = []
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        var freeWaiter: CheckedContinuation<Void, Never>?
    }

    let capacity: Int
    private let state: Mutex<State>

    init(capacity: Int) {
        self.capacity = capacity
        self.state = Mutex(State(free: capacity))
    }

    /// Takes a slot if one is free, else a place in the line. Does not wait.
    func reserve() -> Place {
        state.withLock { state in
            if state.stopped { return .refused }
            if state.free > 0 {
                state.free -= 1
                return .slot
            }
            let number = state.nextNumber
            state.nextNumber += 1
            state.line.append(number)
            return .line(number)
        }
    }

    /// Waits until `place` is a slot. Returns false, holding none, once stopped.
    func wait(_ place: Place) async -> Bool {
        switch place {
        case .slot: return true
        case .refused: return false
        case .line(let number):
            return await withCheckedContinuation { continuation in
                let resumeWith: Bool? = state.withLock { state in
                    if state.granted.remove(number) != nil {
                        if !state.stopped { return true }
                        // Stopped after its slot came: the slot goes back unused.
                        state.free += 1
                        return false
                    }
                    if state.stopped { return false }
                    state.waiters[number] = continuation
                    return nil
                }
                if let resumeWith { continuation.resume(returning: resumeWith) }
            }
        }
    }

    /// Gives a slot back: to the first place in line if there is one, else to the free count.
    func give() {
        let (next, freed) = state.withLock { state -> (CheckedContinuation<Bool, Never>?, CheckedContinuation<Void, Never>?) in
            if !state.stopped, !state.line.isEmpty {
                let number = state.line.removeFirst()
                if let waiter = state.waiters.removeValue(forKey: number) { return (waiter, nil) }
                state.granted.insert(number)
                return (nil, nil)
            }
            state.free += 1
            defer { state.freeWaiter = nil }
            return (nil, state.freeWaiter)
        }
        next?.resume(returning: true)
        freed?.resume()
    }

    /// Whether a slot is free now (and so no claimed job waits for one).
    var hasFree: Bool { state.withLock { $0.free > 0 } }

    /// How many slots are free now: so many jobs claimed next get one at once.
    var freeCount: Int { state.withLock { $0.free } }

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

    /// Stops handing out slots: every place in line, now and later, gets none.
    func stop() {
        let (waiters, freeWaiter) = state.withLock { state in
            state.stopped = true
            defer {
                state.line = []
                state.waiters = [:]
                state.freeWaiter = nil
            }
            return (Array(state.waiters.values), state.freeWaiter)
        }
        for waiter in waiters { waiter.resume(returning: false) }
        freeWaiter?.resume()
    }
}
