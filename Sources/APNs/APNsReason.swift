/// A reason APNs gives for refusing a push (the `reason` of its JSON answer), and what the
/// sender does about it. Unknown reasons are kept (an open enumeration) and classed by status.
public struct APNsReason: Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    /// What to do when APNs answered this reason.
    public enum Disposition: String, Sendable, Hashable {
        /// The token is gone (uninstalled app, reset device) or not this app's: forget it.
        case dropToken
        /// APNs is busy, throttling this device, or failing: send again later, with back-off.
        case retry
        /// The provider token is older than APNs accepts: make a new one and send again.
        case renewProviderToken
        /// The push itself (its headers, payload, topic) or the key is refused: every device
        /// would get the same answer, so the push fails with the reason.
        case failPush
        /// This device alone is refused for a reason the sender cannot repair.
        case refuseDevice
    }

    /// Apple's documented reasons ("Handling notification responses from APNs") and what
    /// each means for the sender; `status` decides for reasons Apple adds later.
    public func disposition(status: Int) -> Disposition {
        if let known = Self.dispositions[rawValue] { return known }
        return status >= 500 ? .retry : .refuseDevice
    }

    static let dispositions: [String: Disposition] = [
        // 400
        "BadCollapseId": .failPush, "BadDeviceToken": .dropToken, "BadExpirationDate": .failPush, "BadMessageId": .failPush,
        "BadPriority": .failPush, "BadTopic": .failPush, "DeviceTokenNotForTopic": .dropToken, "DuplicateHeaders": .failPush,
        "IdleTimeout": .retry, "InvalidPushType": .failPush, "MissingDeviceToken": .refuseDevice, "MissingTopic": .failPush,
        "PayloadEmpty": .failPush, "TopicDisallowed": .failPush,
        // 403
        "BadCertificate": .failPush, "BadCertificateEnvironment": .refuseDevice, "ExpiredProviderToken": .renewProviderToken,
        "Forbidden": .failPush, "InvalidProviderToken": .failPush, "MissingProviderToken": .failPush,
        "UnrelatedKeyIdInToken": .failPush,
        // A key of one environment and a device of the other: that device (any app user can
        // register a sandbox token), not the push.
        "BadEnvironmentKeyIdInToken": .refuseDevice,
        // Not in Apple's table, but what APNs is seen to answer for a key of the other environment.
        "BadEnvironmentKeyInToken": .refuseDevice,
        // 404, 405
        "BadPath": .failPush, "MethodNotAllowed": .failPush,
        // 410
        "ExpiredToken": .dropToken, "Unregistered": .dropToken,
        // 413
        "PayloadTooLarge": .failPush,
        // 429: the second is per device token; the first asks the provider to slow its token changes.
        "TooManyProviderTokenUpdates": .retry, "TooManyRequests": .retry,
        // 500, 503
        "InternalServerError": .retry, "ServiceUnavailable": .retry, "Shutdown": .retry,
    ]

    /// Every reason Apple documents.
    public static var documented: [String] { dispositions.keys.sorted() }
}
