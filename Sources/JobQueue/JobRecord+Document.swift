import Foundation

extension JobRecord {
    /// The job as one JSON object, as `entitle jobs show --json` and the HTTP API show it:
    /// `result` embedded as JSON, the payload (which can hold receipts) only when asked for.
    public func document(includingPayload: Bool = false) -> [String: Any] {
        var object: [String: Any] = [
            "id": id, "type": type, "queue": queue, "status": status.rawValue, "attempt": attempt, "maxAttempts": maxAttempts,
            "createdAt": createdAt, "enqueuedAt": enqueuedAt, "result": Self.embed(result),
        ]
        if includingPayload { object["payload"] = Self.embed(payload) }
        object["idempotencyKey"] = idempotencyKey
        object["startedAt"] = startedAt
        object["finishedAt"] = finishedAt
        object["retryAt"] = retryAt
        object["lastError"] = lastError
        return object
    }

    /// JSON text parsed for embedding; the text itself when it does not parse.
    static func embed(_ text: String?) -> Any {
        guard let text else { return NSNull() }
        return (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) ?? text
    }
}
