/// The App Store environment that produced a piece of data.
///
/// Open-ended: a value Apple adds later decodes and keeps its raw value.
public struct AppStoreEnvironment: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let production = AppStoreEnvironment(rawValue: "Production")
    public static let sandbox = AppStoreEnvironment(rawValue: "Sandbox")
    /// Purchases made in Xcode's StoreKit testing (signed by a local, self-signed key).
    public static let xcode = AppStoreEnvironment(rawValue: "Xcode")
    /// Apple's own local-testing environment.
    public static let localTesting = AppStoreEnvironment(rawValue: "LocalTesting")

    /// Whether this is one of the environments Apple documents.
    public var isKnown: Bool { [.production, .sandbox, .xcode, .localTesting].contains(self) }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
