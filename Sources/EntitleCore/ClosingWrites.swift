import RedisClient
import Synchronization

/// Writes a job makes once its follow-up jobs are enqueued (the renewal index, clearing the
/// customer's outbox), kept to go with its transaction locks' release in one round trip
/// (`TransactionLock.release(_:publisher:job:with:)`) instead of a round trip each.
///
/// A job that writes nothing more once its last customer write is made may offer its locks
/// to that write (`offer(locks:)`): the write releases them itself when it leaves nothing to
/// close (`EntitlementStore.update(releasing:)`), and the release's round trip is not made.
package final class ClosingWrites: Sendable {
    private struct State {
        var calls: [RedisCall] = []
        /// The lock keys and the values their holder left in them, offered to the last write.
        var offered: (keys: [String], values: [String])?
        var released = false
    }
    private let state = Mutex(State())

    package init() {}

    func add(_ more: [RedisCall]) { state.withLock { $0.calls += more } }

    func take() -> [RedisCall] {
        state.withLock { state in
            defer { state.calls = [] }
            return state.calls
        }
    }

    /// Offers these locks (`TransactionLock.releaseInWrite`) to the job's last write.
    package func offer(locks: (keys: [String], values: [String])) { state.withLock { $0.offered = locks } }

    /// The locks offered, while nothing waits to be closed and they are not released yet.
    func releasableLocks() -> (keys: [String], values: [String])? {
        state.withLock { state in
            guard state.calls.isEmpty, !state.released, let offered = state.offered, !offered.keys.isEmpty else { return nil }
            return offered
        }
    }

    func markReleased() { state.withLock { $0.released = true } }

    /// Whether a write deleted every lock offered (the job's release is then not sent).
    package var released: Bool { state.withLock { $0.released } }
}
