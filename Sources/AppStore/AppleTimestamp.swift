import DurationUnits
import Foundation

/// A point in time as Apple sends it: milliseconds since 1970, UTC.
///
/// Xcode's StoreKit testing writes fractional milliseconds (`1697679936049.7297`); they are
/// truncated to whole milliseconds.
public struct AppleTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    /// Whole milliseconds of `date`; dates beyond what 64 bits of milliseconds hold (and
    /// NaN) are clamped, so no input date can trap.
    public init(_ date: Date) { self.milliseconds = Self.milliseconds(date.timeIntervalSince1970 * 1000) }

    /// `value` rounded down to a whole number of milliseconds, clamped to `Int64`'s range
    /// (NaN becomes 0).
    public static func milliseconds(_ value: Double) -> Int64 {
        guard !value.isNaN else { return 0 }
        // 2^63 is exactly representable; anything at or above it does not fit.
        if value >= 9_223_372_036_854_775_807.0 { return .max }
        if value <= -9_223_372_036_854_775_808.0 { return .min }
        return Int64(value.rounded(.down))
    }

    public var date: Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.milliseconds < rhs.milliseconds }

    public var description: String { date.formatted(.iso8601) }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let whole = try? container.decode(Int64.self) {
            milliseconds = whole
        } else if let fractional = try? container.decode(Double.self), fractional.isFinite {
            milliseconds = Self.milliseconds(fractional)
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
