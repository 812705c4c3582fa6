/// A snapshot of one queue, as `entitle queues` prints it.
public struct QueueStats: Sendable, Hashable, Codable {
    public var name: String
    public var pending: Int
    public var scheduled: Int
    /// Jobs claimed by consumers right now.
    public var active: Int
    public var dead: Int
    public var oldestPendingAgeSeconds: Double
    /// Consumers registered (their heartbeats may have expired until the reaper runs).
    public var consumers: Int
    /// Raw counters: `enqueued:TYPE`, `succeeded:TYPE`, `retried:TYPE`, `dead:TYPE`, `reaped`.
    public var counters: [String: Int]
    /// The Redis server (`host:port`) that holds the queue: on a cluster, the primary of
    /// the queue's slot; `nil` when it could not be told.
    public var node: String?

    public init(
        name: String, pending: Int, scheduled: Int, active: Int, dead: Int, oldestPendingAgeSeconds: Double,
        consumers: Int, counters: [String: Int], node: String? = nil
    ) {
        self.name = name
        self.pending = pending
        self.scheduled = scheduled
        self.active = active
        self.dead = dead
        self.oldestPendingAgeSeconds = oldestPendingAgeSeconds
        self.consumers = consumers
        self.counters = counters
        self.node = node
    }

    /// A counter summed over job types, e.g. `total("succeeded")`.
    public func total(_ counter: String) -> Int {
        counters.reduce(0) { $0 + ($1.key.hasPrefix(counter + ":") ? $1.value : 0) }
    }

    /// The job types this queue has counters for.
    public var jobTypes: [String] {
        Set(counters.keys.compactMap { key in key.firstIndex(of: ":").map { String(key[key.index(after: $0)...]) } }).sorted()
    }
}
