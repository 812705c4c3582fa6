/// The Redis keys of one queue. Every key carries the queue's hash tag `{Q}`, so every
/// script of a queue touches one Redis Cluster slot.
public struct QueueKeys: Sendable, Hashable {
    /// The key prefix, `entitle` by default; tests use a unique one each.
    public let prefix: String
    public let queue: String
    private let base: String

    public init(prefix: String = "entitle", queue: String) {
        self.prefix = prefix
        self.queue = queue
        self.base = "\(prefix):{\(queue)}:"
    }

    public var pending: String { base + "pending" }
    public var scheduled: String { base + "scheduled" }
    public var dead: String { base + "dead" }
    public var consumers: String { base + "consumers" }
    /// Counters per job type: `enqueued:TYPE`, `succeeded:TYPE`, `retried:TYPE`, `dead:TYPE`, and `reaped`.
    public var stats: String { base + "stats" }
    /// What scripts prepend to a job id to name its hash (same hash tag, same slot).
    public var jobPrefix: String { base + "job:" }
    public func job(_ id: String) -> String { jobPrefix + id }
    public func active(_ consumer: String) -> String { base + "active:" + consumer }
    public func idempotency(_ key: String) -> String { base + "idem:" + key }
    /// A unique key -> the unfinished job holding it (`EnqueueRequest.uniqueKey`).
    public func unique(_ key: String) -> String { base + "unique:" + key }
    /// The ids of the most recently enqueued jobs, newest first, capped.
    public var recent: String { base + "recent" }
    /// Keys for effects that handlers keep per queue (see `NoopHandler`).
    public func effects(_ name: String) -> String { base + "effects:" + name }

    /// The set of queue names that producers and workers have used (no hash tag: it is
    /// written outside the queue scripts, for discovery only).
    public static func registry(prefix: String) -> String { "\(prefix):queues" }
}
