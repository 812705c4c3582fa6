import Foundation

/// What a producer asks the queue to run.
public struct EnqueueRequest: Sendable, Hashable {
    public var type: String
    /// JSON text; `{}` when the job needs nothing.
    public var payload: String
    public var queue: String
    /// A second request with the same key (on the same queue, within the idempotency TTL)
    /// returns the first job's id instead of making another job.
    public var idempotencyKey: String?
    /// Run no earlier than this long from now.
    public var delay: Duration?
    /// Ten years: a run time further out is a mistake (and would not fit in milliseconds).
    public static let maximumDelay = Duration.seconds(10 * 366 * 86_400)
    /// 0 takes the job type's retry policy.
    public var maxAttempts: Int
    /// A caller-chosen id; a random one when `nil`.
    public var id: String?
    /// While an unfinished job holds this key (on the same queue), another request with it
    /// is refused (`EnqueueResult.Outcome.conflict`, naming the holder). Checked after the
    /// idempotency key, so an exact repeat still gets its own job back.
    public var uniqueKey: String?
    /// The idempotency key names one request: a repeat whose payload differs from the first
    /// job's is refused (`EnqueueResult.Outcome.mismatch`) rather than answered with that job.
    /// Off by default: keys derived from the work itself (Apple's notification ids, follow-up
    /// jobs) are the same work whatever else changed.
    public var repeatMustMatch = false
    /// What the job is for, kept with its status and result once its payload is dropped (a
    /// job that succeeded keeps no input): who may read it. At most 512 bytes.
    public var label: String?
    /// The W3C `traceparent` of the span that enqueued the job, which the job's spans descend
    /// from in the worker. `JobQueue.enqueue` and `EnqueueBatcher.enqueue` fill it from the
    /// current span when it is `nil` and tracing is on; stored in the job record as given.
    public var traceparent: String?

    public init(
        type: String, payload: String = "{}", queue: String = "default", idempotencyKey: String? = nil,
        delay: Duration? = nil, maxAttempts: Int = 0, id: String? = nil, uniqueKey: String? = nil
    ) {
        self.type = type
        self.payload = payload
        self.queue = queue
        self.idempotencyKey = idempotencyKey
        self.delay = delay
        self.maxAttempts = maxAttempts
        self.id = id
        self.uniqueKey = uniqueKey
    }

    /// Throws `JobQueueError.invalidJob` naming the first thing wrong.
    public func validate() throws {
        try Self.validateName(type, what: "job type")
        try Self.validateName(queue, what: "queue name")
        if let id { try Self.validateName(id, what: "job id") }
        if let idempotencyKey, idempotencyKey.isEmpty || idempotencyKey.utf8.count > 256 {
            throw JobQueueError(.invalidJob, "an idempotency key must have 1 to 256 bytes")
        }
        if let label, label.utf8.count > 512 { throw JobQueueError(.invalidJob, "a label must have at most 512 bytes") }
        if let traceparent, !JobTracing.isTraceparent(traceparent) {
            throw JobQueueError(.invalidJob, "a traceparent must be W3C's 00-<trace id>-<parent id>-<flags>")
        }
        if let uniqueKey, uniqueKey.isEmpty || uniqueKey.utf8.count > 256 {
            throw JobQueueError(.invalidJob, "a unique key must have 1 to 256 bytes")
        }
        guard (0...1000).contains(maxAttempts) else {
            throw JobQueueError(.invalidJob, "maxAttempts must be between 0 (the type's default) and 1000")
        }
        if let delay, delay < .zero { throw JobQueueError(.invalidJob, "a delay cannot be negative") }
        if let delay, delay > Self.maximumDelay { throw JobQueueError(.invalidJob, "a delay cannot be longer than 10 years") }
        guard let data = payload.data(using: .utf8),
            (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) != nil
        else { throw JobQueueError(.invalidJob, "the payload is not valid JSON") }
    }

    /// Names go into Redis keys: letters, digits and `-_.:` only, at most 128 of them.
    static func validateName(_ name: String, what: String) throws {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2D || byte == 0x5F || byte == 0x2E || (byte == 0x3A && what != "queue name")
        }
        guard !name.isEmpty, name.utf8.count <= 128, allowed else {
            throw JobQueueError(
                .invalidJob, "a \(what) must be 1 to 128 of A-Z a-z 0-9 - _ .\(what == "queue name" ? "" : " :"), got '\(name.prefix(64))'")
        }
    }
}

/// The answer to an enqueue: a job's id, and what this call did.
public struct EnqueueResult: Sendable, Hashable, Codable {
    public enum Outcome: String, Sendable, Hashable, Codable {
        /// The job was made; `id` is its id.
        case created
        /// The idempotency key named an earlier job, whose id this is.
        case existing
        /// Nothing was made: the unique key is held by the unfinished job whose id this is.
        case conflict
        /// Nothing was made: the idempotency key names the job whose id this is, and its payload
        /// differs from this request's (`EnqueueRequest.repeatMustMatch`).
        case mismatch
    }

    public var id: String
    public var outcome: Outcome
    /// Whether this call made the job.
    public var created: Bool { outcome == .created }

    public init(id: String, outcome: Outcome) {
        self.id = id
        self.outcome = outcome
    }

    public init(id: String, created: Bool) {
        self.init(id: id, outcome: created ? .created : .existing)
    }
}
