import Foundation

/// One push as it goes to every device of an audience: the app, the kind, the headers and
/// the payload, checked as APNs would check them, so a push APNs would refuse for everyone
/// is refused before it is queued.
public struct APNsPush: Sendable, Hashable, Codable {
    public var bundleId: String
    public var pushType: APNsPushType
    /// 10, 5 or 1 (`apns-priority`); background pushes take 5 only.
    public var priority: Int
    /// `apns-expiration`: UNIX seconds until which APNs keeps trying; 0 for one attempt; `nil`
    /// for APNs' own storage policy.
    public var expiration: Int64?
    /// `apns-collapse-id`, at most 64 bytes.
    public var collapseId: String?
    /// The JSON object APNs delivers (`aps` and the publisher's keys), as it will be sent.
    public var payload: String

    public init(
        bundleId: String, pushType: APNsPushType, priority: Int? = nil, expiration: Int64? = nil, collapseId: String? = nil,
        payload: String
    ) throws(APNsError) {
        self.bundleId = bundleId
        self.pushType = pushType
        self.priority = priority ?? pushType.defaultPriority
        self.expiration = expiration
        self.collapseId = collapseId
        self.payload = payload
        try check()
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bundleId = try container.decode(String.self, forKey: .bundleId)
        pushType = try container.decode(APNsPushType.self, forKey: .pushType)
        priority = try container.decode(Int.self, forKey: .priority)
        expiration = try container.decodeIfPresent(Int64.self, forKey: .expiration)
        collapseId = try container.decodeIfPresent(String.self, forKey: .collapseId)
        payload = try container.decode(String.self, forKey: .payload)
        do {
            try check()
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    /// Apple's rules for the headers and the payload ("Sending notification requests to APNs",
    /// "Generating a remote notification").
    func check() throws(APNsError) {
        guard Self.isBundleId(bundleId) else { throw APNsError(.invalidRequest, "bundleId is not a bundle id") }
        guard [1, 5, 10].contains(priority) else { throw APNsError(.invalidRequest, "priority must be 10, 5 or 1") }
        if pushType == .background && priority != 5 {
            throw APNsError(.invalidRequest, "a background push takes priority 5 (Apple refuses 10)")
        }
        if let expiration, expiration < 0 || expiration > 253_402_300_799 {
            throw APNsError(.invalidRequest, "expiration must be UNIX seconds (or 0 for one attempt)")
        }
        if let collapseId {
            guard !collapseId.isEmpty, collapseId.utf8.count <= 64 else {
                throw APNsError(.invalidRequest, "collapseId must be 1 to 64 bytes")
            }
            guard !collapseId.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw APNsError(.invalidRequest, "collapseId must not hold control characters")
            }
        }
        let bytes = payload.utf8.count
        guard bytes > 0 else { throw APNsError(.invalidRequest, "the payload is empty") }
        guard bytes <= pushType.maximumPayloadBytes else {
            throw APNsError(
                .invalidRequest,
                "the payload is \(bytes) bytes; APNs takes at most \(pushType.maximumPayloadBytes) for \(pushType.rawValue) pushes")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any] else {
            throw APNsError(.invalidRequest, "the payload must be a JSON object")
        }
        let aps = object["aps"] as? [String: Any]
        if object["aps"] != nil && aps == nil { throw APNsError(.invalidRequest, "aps must be an object") }
        switch pushType {
        case .background:
            guard let aps, (aps["content-available"] as? NSNumber)?.intValue == 1 else {
                throw APNsError(.invalidRequest, "a background push carries aps.content-available 1")
            }
            for key in ["alert", "sound", "badge"] where aps[key] != nil {
                throw APNsError(.invalidRequest, "a background push carries no aps.\(key) (Apple: content-available only)")
            }
        case .alert:
            guard let aps, aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil else {
                throw APNsError(.invalidRequest, "an alert push carries aps.alert, aps.sound or aps.badge")
            }
        case .voip:
            break
        }
    }

    /// Reverse-DNS letters, digits, hyphens and dots, as App Store Connect allows.
    static func isBundleId(_ text: String) -> Bool {
        (1...155).contains(text.utf8.count) && !text.hasPrefix(".") && !text.hasSuffix(".")
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            }
    }
}
