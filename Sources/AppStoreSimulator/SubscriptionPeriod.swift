import AppStore
import Foundation

/// An ISO 8601 period as App Store Connect sets them (`P3D`, `P1W`, `P1M`, `P2M`, `P3M`,
/// `P6M`, `P1Y`), and how long it lasts in each environment.
public struct SubscriptionPeriod: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Unit: String, Sendable, Hashable {
        case day = "D", week = "W", month = "M", year = "Y"
    }

    public let count: Int
    public let unit: Unit

    public init(count: Int, unit: Unit) {
        self.count = count
        self.unit = unit
    }

    /// Parses `P<n><D|W|M|Y>`.
    public init(iso8601 text: String) throws {
        guard text.hasPrefix("P"), let last = text.last, let unit = Unit(rawValue: String(last)),
            let count = Int(text.dropFirst().dropLast()), count > 0, count <= 1000
        else {
            throw SimulatorError(.invalidConfiguration, "\"\(text)\" is not a period like P1W, P1M or P1Y")
        }
        self.init(count: count, unit: unit)
    }

    public var description: String { "P\(count)\(unit.rawValue)" }

    /// When a period that starts at `start` ends. Sandbox compresses time as Apple's sandbox
    /// does (3 days: 2 minutes, 1 week: 3 minutes, 1 month: 5 minutes, 1 year: 1 hour, and
    /// multiples); production uses the calendar.
    public func end(from start: Date, environment: AppStoreEnvironment) -> Date {
        if environment == .production {
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = .gmt
            let component: Calendar.Component =
                switch unit {
                case .day: .day
                case .week: .weekOfYear
                case .month: .month
                case .year: .year
                }
            return calendar.date(byAdding: component, value: count, to: start) ?? start
        }
        return start.addingTimeInterval(Self.sandboxSeconds(unit) * Double(count))
    }

    /// Sandbox seconds per unit.
    static func sandboxSeconds(_ unit: Unit) -> TimeInterval {
        switch unit {
        case .day: 40
        case .week: 180
        case .month: 300
        case .year: 3600
        }
    }

    /// A span of days (grace period, billing retry, renewal extension) in `environment`'s time.
    static func days(_ days: Int, environment: AppStoreEnvironment) -> TimeInterval {
        environment == .production ? Double(days) * 86_400 : Double(days) * sandboxSeconds(.day)
    }

    public init(from decoder: any Decoder) throws {
        try self.init(iso8601: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
