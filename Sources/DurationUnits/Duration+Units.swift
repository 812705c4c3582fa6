/// The one place a `Duration` becomes a number of seconds, milliseconds or nanoseconds
/// (Redis takes milliseconds, NIO and swift-metrics nanoseconds, Foundation seconds).
/// The integer conversions saturate at `Int64`'s bounds, also for durations beyond what
/// `components` can express: no duration, however it was computed, traps here.
extension Duration {
    /// Seconds, with the fraction.
    package var seconds: Double {
        if self >= .seconds(Int64.max) { return Double(Int64.max) }
        if self <= .seconds(Int64.min) { return Double(Int64.min) }
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// Whole milliseconds, rounded toward zero, saturating.
    package var milliseconds: Int64 { whole(per: 1_000) }

    /// Whole nanoseconds, rounded toward zero, saturating (about 292 years either way).
    package var nanoseconds: Int64 { whole(per: 1_000_000_000) }

    /// Whole `1/unitsPerSecond` units, saturating.
    private func whole(per unitsPerSecond: Int64) -> Int64 {
        // `components` itself traps past Int64 seconds.
        if self >= .seconds(Int64.max) { return .max }
        if self <= .seconds(Int64.min) { return .min }
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: unitsPerSecond)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflowAgain) = scaled.addingReportingOverflow(attoseconds / (1_000_000_000_000_000_000 / unitsPerSecond))
        return overflowAgain ? (seconds < 0 ? .min : .max) : total
    }
}
