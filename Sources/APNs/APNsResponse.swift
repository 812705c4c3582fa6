import Foundation

/// What APNs answered for one push.
public struct APNsResponse: Sendable, Hashable {
    public var status: Int
    /// The `apns-id` APNs echoed (the request's, or one it made).
    public var apnsId: String?
    /// `nil` on success.
    public var reason: APNsReason?
    /// For 410: when APNs learnt the token was no longer valid (ms since 1970).
    public var unregisteredAt: Int64?

    public init(status: Int, apnsId: String? = nil, reason: APNsReason? = nil, unregisteredAt: Int64? = nil) {
        self.status = status
        self.apnsId = apnsId
        self.reason = reason
        self.unregisteredAt = unregisteredAt
    }

    public var delivered: Bool { status == 200 }

    /// What the sender does next.
    public var disposition: APNsReason.Disposition? {
        if delivered { return nil }
        return (reason ?? APNsReason("")).disposition(status: status)
    }

    /// Reads APNs' error body, `{"reason": "...", "timestamp": ms}`; a body that is not that
    /// leaves the reason empty (the status still classes it).
    static func decodeBody(_ body: [UInt8]) -> (reason: APNsReason?, timestamp: Int64?) {
        guard !body.isEmpty, let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return (nil, nil) }
        let reason = (object["reason"] as? String).map(APNsReason.init)
        let timestamp = (object["timestamp"] as? NSNumber)?.int64Value
        return (reason, timestamp)
    }
}
