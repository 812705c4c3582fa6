import RedisClient
import Synchronization

/// Writes a job makes once its follow-up jobs are enqueued (the renewal index, clearing the
/// customer's outbox), kept to go with its transaction locks' release in one round trip
/// (`TransactionLock.release(_:publisher:job:with:)`) instead of a round trip each.
package final class ClosingWrites: Sendable {
    private let calls = Mutex<[RedisCall]>([])

    package init() {}

    func add(_ more: [RedisCall]) { calls.withLock { $0 += more } }

    func take() -> [RedisCall] {
        calls.withLock { calls in
            defer { calls = [] }
            return calls
        }
    }
}
