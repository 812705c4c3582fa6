import Synchronization
import Testing

@testable import JobQueue

/// One watcher per consumer ends the attempts past their deadline; an attempt within it
/// returns its value, and a cancelled caller cancels its attempt.
@Suite struct AttemptTimeoutsTests {
    /// A watcher going, as a consumer's `run` keeps one.
    static func watched() -> (AttemptTimeouts, Task<Void, Never>) {
        let timeouts = AttemptTimeouts(tick: .milliseconds(10))
        return (timeouts, Task { await timeouts.watch() })
    }

    @Test func anAttemptPastItsDeadlineIsCancelledAndTimesOut() async throws {
        let (timeouts, watcher) = Self.watched()
        defer { watcher.cancel() }
        let clock = ContinuousClock()
        let began = clock.now
        let cancelled = Atomic<Bool>(false)
        let failure = await #expect(throws: JobFailure.self) {
            try await timeouts.run(timeout: .milliseconds(100)) {
                do { try await Task.sleep(for: .seconds(30)) } catch {
                    cancelled.store(true, ordering: .relaxed)
                    throw error
                }
            }
        }
        #expect(failure?.code == "timeout" && failure?.isRetryable == true)
        #expect(timeouts.unsettled == 0)
        let sawCancellation = cancelled.load(ordering: .relaxed)
        #expect(sawCancellation)
        #expect(clock.now - began < .seconds(10), "cancelled at its deadline, not when the sleep ended")
    }

    @Test func anAttemptThatIgnoresCancellationPastItsDeadlineStillTimesOut() async throws {
        let (timeouts, watcher) = Self.watched()
        defer { watcher.cancel() }
        do {
            _ = try await timeouts.run(timeout: .milliseconds(50)) { () async throws -> String in
                // Busy past the deadline without looking at cancellation, then an answer.
                let clock = ContinuousClock()
                let until = clock.now + .milliseconds(300)
                while clock.now < until { await Task.yield() }
                return "late"
            }
            Issue.record("an attempt past its deadline returned its value")
        } catch let failure as JobFailure {
            #expect(failure.code == "timeout" && failure.isRetryable)
        }
    }

    @Test func anAttemptWithinItsDeadlineReturnsItsValue() async throws {
        let (timeouts, watcher) = Self.watched()
        defer { watcher.cancel() }
        for index in 0..<100 {
            #expect(try await timeouts.run(timeout: .seconds(60)) { "\(index)" } == "\(index)")
        }
        #expect(timeouts.unsettled == 0, "nothing is left watched")
        await #expect(throws: CancellationError.self) {
            try await timeouts.run(timeout: .seconds(60)) { () async throws -> String in throw CancellationError() }
        }
    }

    @Test func aCancelledCallerCancelsItsAttempt() async throws {
        let (timeouts, watcher) = Self.watched()
        defer { watcher.cancel() }
        let started = AsyncStream<Void>.makeStream()
        let caller = Task {
            try await timeouts.run(timeout: .seconds(60)) { () async throws -> String in
                started.continuation.yield()
                try await Task.sleep(for: .seconds(30))
                return "slept"
            }
        }
        var iterator = started.stream.makeAsyncIterator()
        await iterator.next()
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
    }
}
