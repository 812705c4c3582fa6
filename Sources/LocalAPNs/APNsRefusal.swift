/// An answer other than 200: Apple's HTTP status and `reason` string, as APNs documents them in
/// "Handling notification responses from APNs".
struct APNsRefusal: Error, Sendable, Hashable {
    let status: Int
    let reason: String

    init(_ status: Int, _ reason: String) {
        self.status = status
        self.reason = reason
    }

    static let badCollapseId = APNsRefusal(400, "BadCollapseId")
    static let badDeviceToken = APNsRefusal(400, "BadDeviceToken")
    static let badExpirationDate = APNsRefusal(400, "BadExpirationDate")
    static let badMessageId = APNsRefusal(400, "BadMessageId")
    static let badPriority = APNsRefusal(400, "BadPriority")
    static let badTopic = APNsRefusal(400, "BadTopic")
    static let duplicateHeaders = APNsRefusal(400, "DuplicateHeaders")
    static let invalidPushType = APNsRefusal(400, "InvalidPushType")
    static let missingDeviceToken = APNsRefusal(400, "MissingDeviceToken")
    static let missingTopic = APNsRefusal(400, "MissingTopic")
    static let payloadEmpty = APNsRefusal(400, "PayloadEmpty")
    static let topicDisallowed = APNsRefusal(400, "TopicDisallowed")
    static let expiredProviderToken = APNsRefusal(403, "ExpiredProviderToken")
    static let invalidProviderToken = APNsRefusal(403, "InvalidProviderToken")
    static let missingProviderToken = APNsRefusal(403, "MissingProviderToken")
    static let badPath = APNsRefusal(404, "BadPath")
    static let methodNotAllowed = APNsRefusal(405, "MethodNotAllowed")
    static let payloadTooLarge = APNsRefusal(413, "PayloadTooLarge")
    static let tooManyProviderTokenUpdates = APNsRefusal(429, "TooManyProviderTokenUpdates")
}
