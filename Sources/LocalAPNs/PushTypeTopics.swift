/// Apple's `apns-push-type` values and the suffix each adds to the bundle id in `apns-topic`
/// ("Sending notification requests to APNs").
enum PushTypeTopics {
    static let suffixByPushType: [String: String] = [
        "alert": "",
        "background": "",
        // MDM topics come from the MDM push certificate; the local APNs takes a registered topic as it is.
        "mdm": "",
        "complication": ".complication",
        "controls": ".push-type.controls",
        "fileprovider": ".pushkit.fileprovider",
        "liveactivity": ".push-type.liveactivity",
        "location": ".location-query",
        "pushtotalk": ".voip-ptt",
        "voip": ".voip",
        "widgets": ".push-type.widgets",
    ]

    static let suffixes = Set(suffixByPushType.values.filter { !$0.isEmpty })

    /// The suffix `topic` carries on one of `bundleIds`: "" for a bundle id itself; `nil` when the
    /// topic is no bundle id of these, with or without a known suffix.
    static func suffix(of topic: String, on bundleIds: Set<String>) -> String? {
        if bundleIds.contains(topic) { return "" }
        for suffix in suffixes where topic.hasSuffix(suffix) {
            if bundleIds.contains(String(topic.dropLast(suffix.count))) { return suffix }
        }
        return nil
    }
}
