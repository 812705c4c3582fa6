import AsyncHTTPClient
import Foundation
import NIOCore

/// "Now" as the App Store sees it. In production that is the wall clock. In development the
/// local simulator's clock can be advanced (a month of sandbox time in one call), so a
/// development worker asks it for its offset before each decision.
package struct AppleClock: Sendable {
    /// The simulator whose clock this follows; `nil` for the wall clock.
    package let simulatorURL: String?
    private let httpClient: HTTPClient

    package static let wall = AppleClock(simulatorURL: nil)

    package init(simulatorURL: String?, httpClient: HTTPClient = .shared) {
        self.simulatorURL = simulatorURL
        self.httpClient = httpClient
    }

    /// How far the App Store's clock is ahead of the wall clock.
    package func offset() async throws -> TimeInterval {
        guard let simulatorURL else { return 0 }
        do {
            let response = try await httpClient.execute(HTTPClientRequest(url: simulatorURL + "/simulator/clock"), timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 1 << 16)
            struct State: Decodable {
                var advancedSeconds: Double
                /// The simulator's now (ms) and whether it stands still.
                var now: Double?
                var frozen: Bool?
            }
            let state = try JSONDecoder().decode(State.self, from: Data(body.readableBytesView))
            // A frozen clock stands at one moment: measured against this process's wall clock
            // as the answer arrives, so a moment read right after is that moment, however long
            // the answer took (the simulator's own offset is behind by that long).
            if state.frozen == true, let now = state.now { return now / 1000 - Date().timeIntervalSince1970 }
            return state.advancedSeconds
        } catch {
            throw WorkerError(.appleUnavailable, "the simulator's clock at \(simulatorURL) cannot be read: \(error)")
        }
    }

    package func now() async throws -> Date {
        // The offset first: a wall clock read before the answer came is behind by its wait.
        let offset = try await offset()
        return Date().addingTimeInterval(offset)
    }
}

// What prints of the clock is where it reads the time, not its HTTP client's internals.
extension AppleClock: CustomStringConvertible, CustomReflectable {
    package var description: String { simulatorURL.map { "AppleClock(simulator: \($0))" } ?? "AppleClock(wall)" }
    package var customMirror: Mirror { Mirror(self, children: ["simulatorURL": simulatorURL as Any]) }
}
