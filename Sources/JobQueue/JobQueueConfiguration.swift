/// Settings shared by producers, workers and operators of one deployment.
public struct JobQueueConfiguration: Sendable, Hashable {
    /// Prefix of every key, `entitle` by default.
    public var prefix: String
    /// How long a finished job's record (status and result) stays readable.
    public var resultTTL: Duration
    /// How long an idempotency key maps to its job.
    public var idempotencyTTL: Duration
    /// How long a dead job stays in the dead set (and its record with it).
    public var deadTTL: Duration
    /// The most jobs the dead set keeps; the oldest drop out first.
    public var deadMaxCount: Int
    /// Attempts for jobs enqueued without `maxAttempts` whose type has no retry policy.
    public var defaultMaxAttempts: Int
    /// How many recently enqueued job ids each queue keeps for operators (0 = none).
    public var recentJobs: Int = 200
    /// How new jobs' hashes are written (Jobs/README.md, "Formats"): `.fourth` unless a
    /// rolling upgrade from a version that reads only older ones is under way.
    public var hashFormat: JobHashFormat = .fourth

    public init(
        prefix: String = "entitle", resultTTL: Duration = .seconds(86_400), idempotencyTTL: Duration = .seconds(86_400),
        deadTTL: Duration = .seconds(7 * 86_400), deadMaxCount: Int = 10_000, defaultMaxAttempts: Int = 10
    ) {
        self.prefix = prefix
        self.resultTTL = resultTTL
        self.idempotencyTTL = idempotencyTTL
        self.deadTTL = deadTTL
        self.deadMaxCount = deadMaxCount
        self.defaultMaxAttempts = defaultMaxAttempts
    }

    package func keys(_ queue: String) -> QueueKeys { QueueKeys(prefix: prefix, queue: queue) }
}
