/// A value from a list Apple may extend at any time. Unknown values decode instead of failing
/// and keep their raw value, so a new Apple value never drops a purchase on the floor.
public protocol AppleOpenEnumeration: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible
where RawValue: Codable & Sendable & Hashable & CustomStringConvertible {
    init(rawValue: RawValue)
}

extension AppleOpenEnumeration {
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(RawValue.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue.description }
}
