import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// A day of queue figures at minute resolution: one sample a minute however many processes
/// try, oldest first, at most a day of them.
@Suite struct QueueHistoryTests {
    @Test func oneSampleAMinuteWhoeverTriesBoundedToADay() async throws {
        let harness = try await QueueHarness("queue-history")
        let queue = harness.queue
        _ = try await queue.enqueue(batch: (0..<3).map { _ in harness.request() })
        let history = QueueHistory(jobQueue: queue)
        let minute = Date(timeIntervalSince1970: 1_790_000_040)
        #expect(try await history.record(at: minute))
        // Another process, the same minute: nothing more is written.
        #expect(try await !QueueHistory(jobQueue: queue).record(at: minute.addingTimeInterval(15)))
        #expect(try await history.record(at: minute.addingTimeInterval(60)))
        var samples = try await history.samples()
        #expect(samples.count == 2 && samples[0].at < samples[1].at)
        #expect(samples[0].queues[harness.name]?.pending == 3 && samples[0].queues[harness.name]?.enqueued == 3)
        // A day and a few minutes later: a day of samples is kept.
        for offset in 2...(QueueHistory.minutes + 5) {
            try await history.record(at: minute.addingTimeInterval(Double(offset) * 60))
        }
        samples = try await history.samples()
        #expect(samples.count == QueueHistory.minutes)
        #expect(samples.last?.at == Int64((minute.timeIntervalSince1970 / 60).rounded(.down) + Double(QueueHistory.minutes + 5)) * 60_000)
    }
}
