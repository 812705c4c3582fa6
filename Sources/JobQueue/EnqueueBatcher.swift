import Synchronization

/// Coalesces enqueues from many concurrent callers (an HTTP server's requests) into few
/// script calls: each caller's request is validated on its own (a bad one fails alone),
/// then waits while up to `maximumConcurrentFlushes` batches are in flight, and goes with
/// the next batch. Idle, a request is sent at once; busy, one round trip carries many.
///
/// Idempotency and unique keys behave as with `JobQueue.enqueue`: the script runs a
/// batch's requests in order, so two equal requests in one batch make one job.
public final class EnqueueBatcher: Sendable {
    private struct State {
        var waiting: [(request: EnqueueRequest, continuation: CheckedContinuation<EnqueueResult, any Error>)] = []
        var flushes = 0
    }

    public let jobQueue: JobQueue
    private let maximumConcurrentFlushes: Int
    private let maximumBatch: Int
    private let state = Mutex(State())

    public init(jobQueue: JobQueue, maximumConcurrentFlushes: Int = 4, maximumBatch: Int = 256) {
        self.jobQueue = jobQueue
        self.maximumConcurrentFlushes = max(1, maximumConcurrentFlushes)
        self.maximumBatch = max(1, maximumBatch)
    }

    /// Enqueues one job, sharing a round trip with whatever else is waiting.
    public func enqueue(_ request: EnqueueRequest) async throws -> EnqueueResult {
        try request.validate()
        // The trace is the caller's: the flush that sends the request runs in another task.
        return try await JobTracing.withEnqueueSpan([request]) { traced in try await self.send(traced[0]) }
    }

    private func send(_ request: EnqueueRequest) async throws -> EnqueueResult {
        try await withCheckedThrowingContinuation { continuation in
            let startFlush = state.withLock { state in
                state.waiting.append((request, continuation))
                guard state.flushes < maximumConcurrentFlushes else { return false }
                state.flushes += 1
                return true
            }
            // Unstructured on purpose: the flush outlives the caller that started it and
            // serves the others; it ends when nothing is waiting.
            if startFlush { Task { await self.flush() } }
        }
    }

    private func flush() async {
        while true {
            let batch = state.withLock { state in
                let batch = Array(state.waiting.prefix(maximumBatch))
                state.waiting.removeFirst(batch.count)
                if batch.isEmpty { state.flushes -= 1 }
                return batch
            }
            guard !batch.isEmpty else { return }
            // Each caller hears about its own job only: one failed script call fails only its requests.
            let outcomes = await jobQueue.enqueueEach(validated: batch.map(\.request))
            for (item, outcome) in zip(batch, outcomes) { item.continuation.resume(with: outcome) }
        }
    }
}
