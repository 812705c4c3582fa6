import Foundation
import JobQueue
import RedisClient
import RedisTestSupport

/// A queue under a prefix of its own, plus helpers to run workers against it.
struct QueueHarness {
    let queue: JobQueue
    let keys: QueueKeys
    var redis: RedisConnectionPool { queue.redis }
    var name: String { keys.queue }

    init(_ test: String, configuration: JobQueueConfiguration? = nil) async throws {
        var configuration = configuration ?? JobQueueConfiguration()
        configuration.prefix = TestRedis.uniquePrefix(test)
        queue = JobQueue(redis: try await TestRedis.pool(), configuration: configuration, logger: TestRedis.logger)
        keys = configuration.keys("q-\(UUID().uuidString.prefix(6).lowercased())")
    }

    func request(
        _ type: String = "noop", payload: String = "{}", idempotencyKey: String? = nil, delay: Duration? = nil, maxAttempts: Int = 0
    )
        -> EnqueueRequest
    {
        EnqueueRequest(type: type, payload: payload, queue: name, idempotencyKey: idempotencyKey, delay: delay, maxAttempts: maxAttempts)
    }

    func enqueue(_ type: String = "noop", payload: String = "{}", maxAttempts: Int = 0) async throws -> String {
        try await queue.enqueue(request(type, payload: payload, maxAttempts: maxAttempts)).id
    }

    func job(_ id: String) async throws -> JobRecord? { try await queue.job(id: id, queue: name) }

    /// A worker on this queue with fast timings. The heartbeat TTL stays long so that a test
    /// process starved of CPU (the crash test runs alongside) does not reap its own consumer;
    /// tests that need a lost consumer expire it themselves.
    func worker(
        concurrency: Int = 4, registry: JobHandlerRegistry = .builtIn(), shutdownTimeout: Duration = .seconds(5),
        heartbeatInterval: Duration = .milliseconds(200), heartbeatTTL: Duration = .seconds(10)
    ) -> WorkerService {
        var settings = QueueConsumer.Settings(concurrency: concurrency)
        settings.heartbeatInterval = heartbeatInterval
        settings.heartbeatTTL = heartbeatTTL
        settings.blockTimeout = .milliseconds(200)
        var configuration = WorkerService.Configuration(queues: [name: settings])
        configuration.shutdownTimeout = shutdownTimeout
        configuration.promoteInterval = .milliseconds(20)
        configuration.reapInterval = .milliseconds(200)
        return WorkerService(configuration: configuration, jobQueue: queue, registry: registry, logger: TestRedis.logger)
    }

    /// Runs `body` while `worker` runs, then stops it gracefully and waits for it.
    func whileRunning<T: Sendable>(_ worker: WorkerService, _ body: () async throws -> T) async throws -> T {
        let running = Task { try await worker.run() }
        do {
            let result = try await body()
            worker.stop()
            try await running.value
            return result
        } catch {
            worker.stop()
            _ = try? await running.value
            throw error
        }
    }

    func waitForStatus(_ id: String, _ status: JobStatus, timeout: Duration = .seconds(20)) async throws -> JobRecord {
        var last: JobRecord?
        try await eventually("job \(id) to be \(status)", timeout: timeout) {
            last = try await job(id)
            return last?.status == status
        }
        guard let last else { throw TimedOut(what: "job \(id)") }
        return last
    }
}

/// A handler whose behaviour a test scripts with a closure.
struct ClosureHandler: JobHandler {
    let body: @Sendable (JobContext) async throws -> String?
    func handle(_ job: JobContext) async throws -> String? { try await body(job) }
}

/// A value tests mutate from handlers.
final class Box<Value: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: every access holds `lock`.
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func update<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
    var current: Value { update { $0 } }
}
