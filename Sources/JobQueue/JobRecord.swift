/// A job as stored in its hash `PREFIX:{Q}:job:ID`: the envelope plus its progress.
///
/// Times are milliseconds since the Unix epoch. `payload` and `result` are JSON text (the
/// result as it was before `StoredResult` packed it); a job that succeeded keeps no payload
/// (empty here), only its `label`.
public struct JobRecord: Sendable, Codable, Hashable {
    public var id: String
    public var type: String
    public var queue: String
    public var payload: String
    public var status: JobStatus
    public var attempt: Int
    /// 0 means the job type's default.
    public var maxAttempts: Int
    public var idempotencyKey: String?
    public var createdAt: Int64
    public var enqueuedAt: Int64
    public var startedAt: Int64?
    public var finishedAt: Int64?
    public var retryAt: Int64?
    public var lastError: String?
    public var result: String?
    /// What the job is for (`EnqueueRequest.label`), kept after its payload.
    public var label: String?
    /// The W3C `traceparent` of the span that enqueued it (`EnqueueRequest.traceparent`).
    public var traceparent: String?

    public init(
        id: String, type: String, queue: String, payload: String, status: JobStatus, attempt: Int = 0,
        maxAttempts: Int = 0, idempotencyKey: String? = nil, createdAt: Int64, enqueuedAt: Int64,
        startedAt: Int64? = nil, finishedAt: Int64? = nil, retryAt: Int64? = nil, lastError: String? = nil,
        result: String? = nil, label: String? = nil, traceparent: String? = nil
    ) {
        self.id = id
        self.type = type
        self.queue = queue
        self.payload = payload
        self.status = status
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.idempotencyKey = idempotencyKey
        self.createdAt = createdAt
        self.enqueuedAt = enqueuedAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.retryAt = retryAt
        self.lastError = lastError
        self.result = result
        self.label = label
        self.traceparent = traceparent
    }

    /// Reads a job hash (HGETALL) of job `id` in `queue` (its key's); `nil` when a field the
    /// envelope needs is missing. A field left out holds its default (the hash's second and
    /// third formats): attempt and maxAttempts 0, no idempotency key, enqueuedAt the creation
    /// time, status `queued`.
    package init?(fields: [String: String], id: String, queue: String) {
        guard let type = fields["type"], let status = JobStatus(rawValue: fields["status"] ?? JobStatus.queued.rawValue),
            let createdAt = fields["createdAt"].flatMap(Int64.init)
        else { return nil }
        let enqueuedAt = fields["enqueuedAt"].flatMap(Int64.init) ?? createdAt
        self.init(
            id: fields["id"] ?? id, type: type, queue: fields["queue"] ?? queue, payload: fields["payload"] ?? "", status: status,
            attempt: fields["attempt"].flatMap(Int.init) ?? 0, maxAttempts: fields["maxAttempts"].flatMap(Int.init) ?? 0,
            idempotencyKey: fields["idempotencyKey"].flatMap { $0.isEmpty ? nil : $0 },
            createdAt: createdAt, enqueuedAt: enqueuedAt,
            startedAt: fields["startedAt"].flatMap(Int64.init), finishedAt: fields["finishedAt"].flatMap(Int64.init),
            retryAt: fields["retryAt"].flatMap(Int64.init), lastError: fields["lastError"], result: StoredResult.result { fields[$0] },
            label: fields["label"],
            traceparent: fields["traceparent"]
        )
    }
}
