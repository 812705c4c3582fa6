import Foundation

/// A point in time as Apple sends it: milliseconds since 1970, UTC.
///
/// Xcode's StoreKit testing writes fractional milliseconds (`1697679936049.7297`); they are
/// truncated to whole milliseconds.
public struct AppleTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    public init(_ date: Date) { self.milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down)) }

    public var date: Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.milliseconds < rhs.milliseconds }

    public var description: String { date.formatted(.iso8601) }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let whole = try? container.decode(Int64.self) {
            milliseconds = whole
        } else if let fractional = try? container.decode(Double.self), fractional.isFinite,
            abs(fractional) < 9.2e18
        {
            milliseconds = Int64(fractional.rounded(.down))
        } else if let text = try? container.decode(String.self), let whole = Int64(text) {
            // verifyReceipt sends every number as a string.
            milliseconds = whole
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected milliseconds since 1970")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(milliseconds)
    }
}
