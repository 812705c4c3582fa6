import DurationUnits
import EntitleCore
import Metrics

/// Where receipt jobs spend their time, for dashboards and `bench/receipts.py`:
/// `entitle_receipt_phase_seconds{phase}` with `verify` (JWS checks of what the app sent),
/// `apple` (calls to Apple, and to the simulator's clock in development), `store` (locks,
/// owners and entitlement writes in Redis) and `total`. Created once; the labels are bounded.
enum ReceiptTimings {
    enum Phase: String, CaseIterable { case verify, apple, store, total }

    static let timers: [Phase: Timer] = Dictionary(
        uniqueKeysWithValues: Phase.allCases.map {
            ($0, Timer(label: "entitle_receipt_phase_seconds", dimensions: [("phase", $0.rawValue)]))
        })

    static func measure<Result>(_ phase: Phase, _ body: () async throws -> Result) async rethrows -> Result {
        let start = ContinuousClock.now
        defer {
            let elapsed = ContinuousClock.now - start
            timers[phase]?.recordNanoseconds(elapsed.nanoseconds)
        }
        return try await body()
    }
}
