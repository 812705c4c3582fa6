/// The Redis keys of one queue. Every key carries the queue's hash tag `{Q}`, so every
/// script of a queue touches one Redis Cluster slot.
package struct QueueKeys: Sendable, Hashable {
    /// The key prefix, `entitle` by default; tests use a unique one each.
    package let prefix: String
    package let queue: String
    private let base: String

    package init(prefix: String = "entitle", queue: String) {
        self.prefix = prefix
        self.queue = queue
        self.base = "\(prefix):{\(queue)}:"
    }

    package var pending: String { base + "pending" }
    package var scheduled: String { base + "scheduled" }
    package var dead: String { base + "dead" }
    package var consumers: String { base + "consumers" }
    /// Counters per job type: `enqueued:TYPE`, `succeeded:TYPE`, `retried:TYPE`, `deferred:TYPE`, `dead:TYPE`, and `reaped`.
    package var stats: String { base + "stats" }
    /// What scripts prepend to a job id to name its hash (same hash tag, same slot).
    package var jobPrefix: String { base + "job:" }
    package func job(_ id: String) -> String { jobPrefix + id }
    package func active(_ consumer: String) -> String { base + "active:" + consumer }
    package func idempotency(_ key: String) -> String { base + "idem:" + key }
    /// A unique key -> the unfinished job holding it (`EnqueueRequest.uniqueKey`).
    package func unique(_ key: String) -> String { base + "unique:" + key }
    /// The ids of the most recently enqueued jobs, newest first, capped.
    package var recent: String { base + "recent" }
    /// The sharded channel on which `finish` publishes the ids of waited-for jobs as they end.
    package var finished: String { base + "finished" }
    /// Keys for effects that handlers keep per queue (see `NoopHandler`).
    package func effects(_ name: String) -> String { base + "effects:" + name }

    /// The set of queue names that producers and workers have used (no hash tag: it is
    /// written outside the queue scripts, for discovery only).
    package static func registry(prefix: String) -> String { "\(prefix):queues" }
}
