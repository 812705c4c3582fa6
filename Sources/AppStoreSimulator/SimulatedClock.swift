import Foundation
import Synchronization

/// The simulator's time: the wall clock plus whatever tests and operators advanced it by.
/// Advancing only ever moves time forward, so signed dates stay monotonic.
public final class SimulatedClock: Sendable {
    private let offset: Mutex<TimeInterval>

    public init(offset: TimeInterval = 0) {
        self.offset = Mutex(offset)
    }

    public var now: Date { Date().addingTimeInterval(offset.withLock { $0 }) }

    /// How far ahead of the wall clock the simulator is.
    public var advanced: TimeInterval { offset.withLock { $0 } }

    /// Moves time forward by `seconds` (≥ 0) and returns the new time.
    @discardableResult
    public func advance(by seconds: TimeInterval) -> Date {
        let added = max(0, seconds)
        return Date().addingTimeInterval(
            offset.withLock {
                $0 += added; return $0
            })
    }
}
