import DurationUnits
import Logging
import RedisClient

/// Runs jobs of one type. Handlers must be idempotent: delivery is at least once.
public protocol JobHandler: Sendable {
    /// Does the job's work and returns its result as JSON text (or `nil`).
    /// Throw `JobFailure` to choose between retry and dead; any other error is retried.
    /// Handlers are cancelled at their timeout and on a forced shutdown: honour cancellation.
    func handle(_ job: JobContext) async throws -> String?
}

/// What a handler knows about the job it runs.
public struct JobContext: Sendable {
    public let id: String
    public let type: String
    public let queue: String
    /// JSON text.
    public let payload: String
    /// 1 for the first run.
    public let attempt: Int
    public let maxAttempts: Int
    /// The queue's own connection and keys: for the queue's built-in handlers, not for
    /// handlers of a library user (they keep their state behind their own store, and their
    /// per-job notes in `memo`).
    package let redis: RedisConnectionPool
    package let keys: QueueKeys
    /// The consumer's logger; `logger` adds this job's metadata to it.
    let baseLogger: Logger

    /// Carries job id, type and attempt as metadata; never log payload contents with it.
    /// Built when a handler asks (setting metadata costs more than a no-op job does).
    public var logger: Logger {
        var logger = baseLogger
        for (key, value) in JobContext.metadata(id: id, type: type, attempt: attempt) { logger[metadataKey: key] = value }
        return logger
    }

    /// A note this job left itself on an earlier run (`setMemo`), kept with the job's record
    /// until the record expires: what a rerun after a crash must not decide again.
    /// `legacyField`: the job-hash field where an earlier version kept this note, read when
    /// there is no memo (a job rerun across an upgrade).
    public func memo(_ name: String, legacyField: String? = nil) async throws -> String? {
        Self.memo(from: try await redis.pipeline(memoReads(name, legacyField: legacyField)))
    }

    /// The reads `memo(_:legacyField:)` makes, for a handler that pipelines them with its
    /// own; `memo(from:)` reads their replies.
    package func memoReads(_ name: String, legacyField: String? = nil) -> [[String]] {
        var commands = [["HGET", keys.job(id), Self.memoField(name)]]
        if let legacyField { commands.append(["HGET", keys.job(id), legacyField]) }
        return commands
    }

    /// The memo in the replies to `memoReads`.
    package static func memo(from replies: some Sequence<RedisReply>) -> String? {
        replies.lazy.compactMap(\.string).first
    }

    /// Keeps a note for this job's later runs, replacing an earlier one.
    public func setMemo(_ name: String, _ value: String) async throws {
        _ = try await redis.send(["HSET", keys.job(id), Self.memoField(name), value])
    }

    /// Keeps `value` unless a note is already there; the note as kept (the first run's).
    public func memo(_ name: String, keepingFirst value: String, legacyField: String? = nil) async throws -> String {
        if let kept = try await memo(name, legacyField: legacyField) { return kept }
        let field = Self.memoField(name)
        let replies = try await redis.pipeline([["HSETNX", keys.job(id), field, value], ["HGET", keys.job(id), field]])
        return replies.last?.string ?? value
    }

    /// Memo fields are prefixed, so no note can overwrite a field of the queue's own.
    static func memoField(_ name: String) -> String { "memo:" + name }

    static func metadata(id: String, type: String, attempt: Int) -> Logger.Metadata {
        ["job": .string(id), "type": .string(type), "attempt": .stringConvertible(attempt)]
    }
}

/// A handler's failure, saying whether another attempt may succeed.
public struct JobFailure: Error, Sendable, Hashable, CustomStringConvertible {
    public let code: String
    public let message: String
    public let isRetryable: Bool
    /// When another attempt makes sense, if the handler knows (e.g. Apple's Retry-After).
    public let retryAfter: Duration?
    /// The job could not start its work yet (a lock held by another job): run it again
    /// after `retryAfter` without spending an attempt.
    public var isDeferral = false

    public static func retryable(_ code: String, _ message: String, after: Duration? = nil) -> JobFailure {
        JobFailure(code: code, message: message, isRetryable: true, retryAfter: after)
    }

    /// Not a failure: the job must wait its turn (another job holds what it needs). It runs
    /// again after `after` with its attempt given back, however often that happens.
    public static func deferred(_ code: String, _ message: String, after: Duration) -> JobFailure {
        JobFailure(code: code, message: message, isRetryable: true, retryAfter: after, isDeferral: true)
    }

    public static func permanent(_ code: String, _ message: String) -> JobFailure {
        JobFailure(code: code, message: message, isRetryable: false, retryAfter: nil)
    }

    public var description: String { "\(code): \(message)" }
}

/// When to try a failed job again, and how often at most.
public struct RetryPolicy: Sendable, Hashable {
    public var base: Duration
    public var cap: Duration
    public var maxAttempts: Int

    public init(base: Duration = .seconds(2), cap: Duration = .seconds(3600), maxAttempts: Int = 10) {
        self.base = base
        self.cap = cap
        self.maxAttempts = maxAttempts
    }

    /// The wait after failed attempt `attempt` (1-based): `min(cap, base * 2^(attempt-1))`
    /// with equal jitter, i.e. uniformly between half of it and all of it.
    public func delay(afterAttempt attempt: Int, using generator: inout some RandomNumberGenerator) -> Duration {
        let exponent = UInt64(min(max(attempt - 1, 0), 40))
        let ceiling = min(cap.seconds, base.seconds * Double(UInt64(1) << exponent))
        let seconds = ceiling / 2 + Double.random(in: 0...(ceiling / 2), using: &generator)
        return .milliseconds(Int64(seconds * 1000))
    }

}

/// How a worker runs one job type.
public struct JobRegistration: Sendable {
    public var handler: any JobHandler
    public var retryPolicy: RetryPolicy
    /// The longest one attempt may run before it is cancelled and retried (up to 50 ms
    /// after it: one watcher per queue's consumer looks over the deadlines). An attempt that
    /// ends after it fails with `timeout`, whatever it returned.
    public var timeout: Duration

    public init(handler: any JobHandler, retryPolicy: RetryPolicy = .init(), timeout: Duration = .seconds(60)) {
        self.handler = handler
        self.retryPolicy = retryPolicy
        self.timeout = timeout
    }
}

/// The handlers a worker knows, keyed by job type.
public struct JobHandlerRegistry: Sendable {
    public private(set) var registrations: [String: JobRegistration] = [:]

    public init() {}

    /// A registry with the built-in `noop` type.
    public static func builtIn() -> JobHandlerRegistry {
        var registry = JobHandlerRegistry()
        registry.register(
            "noop",
            JobRegistration(handler: NoopHandler(), retryPolicy: RetryPolicy(base: .milliseconds(200), cap: .seconds(30), maxAttempts: 5)))
        return registry
    }

    public mutating func register(_ type: String, _ registration: JobRegistration) {
        registrations[type] = registration
    }

    public subscript(type: String) -> JobRegistration? { registrations[type] }
}
