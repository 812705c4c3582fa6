/// One request as the server read it off an HTTP/2 stream: what `LocalAPNs` needs to answer it,
/// gathered outside the actor so that the actor's share of each request stays small.
struct PushRequest: Sendable {
    var method: String
    var path: String
    var authorization: String?
    var topic: String?
    var pushType: String?
    var priority: String?
    var expiration: String?
    var collapseId: String?
    var apnsId: String?
    /// `authorization` or an `apns-` field appeared more than once.
    var hasDuplicateHeaders = false
    /// Every byte of the body, however many were kept.
    var bodySize = 0
    /// The body when it is no larger than any payload APNs takes; `nil` when larger.
    var body: [UInt8]? = []
    /// The body parses as a JSON object (APNs payloads are dictionaries with `aps`).
    var bodyIsJSONObject = false
    /// The HTTP/2 connection the stream belongs to (its parent channel), for the token-update rule.
    var connection: ObjectIdentifier?

    init(method: String, path: String) {
        self.method = method
        self.path = path
    }

    /// The largest body APNs takes: 5120 bytes for VoIP, 4096 bytes for everything else.
    static let largestPayload = 5120

    /// Stores a field by its lowercase name, noting a repeat.
    mutating func set(field name: String, value: String) {
        func keep(_ slot: inout String?) {
            if slot != nil { hasDuplicateHeaders = true }
            slot = value
        }
        switch name {
        case "authorization": keep(&authorization)
        case "apns-topic": keep(&topic)
        case "apns-push-type": keep(&pushType)
        case "apns-priority": keep(&priority)
        case "apns-expiration": keep(&expiration)
        case "apns-collapse-id": keep(&collapseId)
        case "apns-id": keep(&apnsId)
        default: break
        }
    }
}
