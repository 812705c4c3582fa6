import Foundation

/// A job as one JSON document, as `entitle jobs show --json` and the HTTP API show it: the
/// result (and the payload, which can hold receipts, only when asked for) embedded as JSON.
public struct JobDocument: Encodable, Sendable, Hashable {
    public var id: String
    public var type: String
    public var queue: String
    public var status: String
    public var attempt: Int
    public var maxAttempts: Int
    /// ms since 1970.
    public var createdAt: Int64
    public var enqueuedAt: Int64
    public var startedAt: Int64?
    public var finishedAt: Int64?
    public var retryAt: Int64?
    public var lastError: String?
    public var idempotencyKey: String?
    /// Always written (`null` before the job finished).
    public var result: EmbeddedJSON
    public var payload: EmbeddedJSON?

    private enum CodingKeys: String, CodingKey {
        case id, type, queue, status, attempt, maxAttempts, createdAt, enqueuedAt, startedAt, finishedAt, retryAt, lastError
        case idempotencyKey, result, payload
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(type, forKey: .type)
        try container.encode(queue, forKey: .queue)
        try container.encode(status, forKey: .status)
        try container.encode(attempt, forKey: .attempt)
        try container.encode(maxAttempts, forKey: .maxAttempts)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(enqueuedAt, forKey: .enqueuedAt)
        try container.encodeIfPresent(startedAt, forKey: .startedAt)
        try container.encodeIfPresent(finishedAt, forKey: .finishedAt)
        try container.encodeIfPresent(retryAt, forKey: .retryAt)
        try container.encodeIfPresent(lastError, forKey: .lastError)
        try container.encodeIfPresent(idempotencyKey, forKey: .idempotencyKey)
        try container.encode(result, forKey: .result)
        try container.encodeIfPresent(payload, forKey: .payload)
    }
}

/// JSON text written as the JSON it holds; text that is not JSON is written as a string,
/// and `nil` as `null`.
public struct EmbeddedJSON: Encodable, Sendable, Hashable {
    public var text: String?

    public init(_ text: String?) { self.text = text }

    public func encode(to encoder: any Encoder) throws {
        guard let text else {
            var container = encoder.singleValueContainer()
            try container.encodeNil()
            return
        }
        // Handlers' results are JSON by contract; a result that is not is shown as the text it is.
        if let value = try? JSONValue(parsing: Array(text.utf8)) {
            try value.encode(to: encoder)
        } else {
            var container = encoder.singleValueContainer()
            try container.encode(text)
        }
    }
}

extension JobRecord {
    /// The job as a `JobDocument`; the payload only when asked for, and only while the record
    /// keeps one (a job that succeeded dropped it: no `""` stands in for it).
    public func document(includingPayload: Bool = false) -> JobDocument {
        JobDocument(
            id: id, type: type, queue: queue, status: status.rawValue, attempt: attempt, maxAttempts: maxAttempts,
            createdAt: createdAt, enqueuedAt: enqueuedAt, startedAt: startedAt, finishedAt: finishedAt, retryAt: retryAt,
            lastError: lastError, idempotencyKey: idempotencyKey, result: EmbeddedJSON(result),
            payload: includingPayload && !payload.isEmpty ? EmbeddedJSON(payload) : nil)
    }
}
