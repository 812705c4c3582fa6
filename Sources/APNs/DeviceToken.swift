/// An APNs device token as apps hand it over: hex, 32 to 100 bytes (Apple documents no fixed
/// length; today's tokens are 32 bytes, and Apple has said they may grow). Kept lowercase, so
/// one device is one token however an app spelled it.
public struct DeviceToken: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Lowercase hex.
    public let hex: String

    public static let minimumBytes = 32
    public static let maximumBytes = 100

    /// `nil` unless `text` is hex of an even length between 64 and 200 characters.
    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count % 2 == 0, (Self.minimumBytes * 2...Self.maximumBytes * 2).contains(bytes.count) else { return nil }
        var lowered: [UInt8] = []
        lowered.reserveCapacity(bytes.count)
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): lowered.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): lowered.append(byte + 32)
            default: return nil
            }
        }
        hex = String(decoding: lowered, as: UTF8.self)
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let token = DeviceToken(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a device token"))
        }
        self = token
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }

    /// The first eight characters: enough to tell tokens apart in a log, not to push to one.
    public var description: String { String(hex.prefix(8)) + "…" }
}
