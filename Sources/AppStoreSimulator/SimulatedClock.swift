import Foundation
import Synchronization

/// The simulator's time: the wall clock plus whatever tests and operators advanced it by,
/// or, frozen, a fixed moment that only advancing moves (so lifecycle events happen only
/// when a test says, never because the wall clock crossed a due date mid-test). Advancing
/// only ever moves time forward, so signed dates stay monotonic.
public final class SimulatedClock: Sendable {
    private struct State {
        var offset: TimeInterval
        /// The moment time stands at while frozen.
        var frozenAt: Date?
    }

    private let state: Mutex<State>

    public init(offset: TimeInterval = 0) {
        self.state = Mutex(State(offset: offset, frozenAt: nil))
    }

    public var now: Date { state.withLock { $0.frozenAt ?? Date().addingTimeInterval($0.offset) } }

    /// How far ahead of the wall clock the simulator is (now minus the wall clock, also while frozen).
    public var advanced: TimeInterval { state.withLock { ($0.frozenAt ?? Date().addingTimeInterval($0.offset)).timeIntervalSinceNow } }

    public var isFrozen: Bool { state.withLock { $0.frozenAt != nil } }

    /// Moves time forward by `seconds` (≥ 0) and returns the new time.
    @discardableResult
    public func advance(by seconds: TimeInterval) -> Date {
        let added = max(0, seconds)
        return state.withLock { state in
            state.offset += added
            if let frozen = state.frozenAt { state.frozenAt = frozen.addingTimeInterval(added) }
            return state.frozenAt ?? Date().addingTimeInterval(state.offset)
        }
    }

    /// Stops time where it is (`true`), or lets it run on from there with the wall clock (`false`).
    public func freeze(_ frozen: Bool) {
        state.withLock { state in
            if frozen, state.frozenAt == nil {
                state.frozenAt = Date().addingTimeInterval(state.offset)
            } else if !frozen, let at = state.frozenAt {
                state.offset = at.timeIntervalSinceNow
                state.frozenAt = nil
            }
        }
    }
}
