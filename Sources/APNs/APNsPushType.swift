/// The `apns-push-type` of a push, and what it asks of the topic and priority.
///
/// Entitle sends the three kinds its customers register devices for; the others Apple
/// defines (complication, fileprovider, liveactivity, location, mdm, pushtotalk, widgets)
/// need topics and entitlements of their own.
public enum APNsPushType: String, Sendable, Hashable, Codable, CaseIterable {
    /// A visible alert, sound or badge.
    case alert
    /// `content-available` only: the app is woken to fetch new content. Apple requires
    /// priority 5 and throttles these.
    case background
    /// A PushKit VoIP push to a softphone: the topic is the bundle id with `.voip`.
    case voip

    /// The `apns-topic` for an app's bundle id.
    public func topic(bundleId: String) -> String { self == .voip ? bundleId + ".voip" : bundleId }

    /// The priority sent when the publisher gives none: 10 (at once) for alerts and VoIP, 5
    /// (the only one allowed) for background pushes.
    public var defaultPriority: Int { self == .background ? 5 : 10 }

    /// The largest payload APNs takes for this kind, in bytes.
    public var maximumPayloadBytes: Int { self == .voip ? 5120 : 4096 }
}
