import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// Apple's 429 with Retry-After is the whole publisher's: once one job meets it, the
/// publisher's other jobs that ask Apple wait until then (without spending an attempt), and
/// every one succeeds after.
@Suite struct ApplePauseFlowTests {
    @Test(.timeLimit(.minutes(3))) func aRateLimitPausesThePublishersAppleJobsUntilRetryAfter() async throws {
        try await APIStack.run("apple-pause", worker: true) { api in
            try await api.simulator(
                "/simulator/faults", #"{"target":"serverAPI","status":429,"pathContains":"v1/subscriptions/","retryAfterSeconds":3}"#)
            func submit(_ customer: String) async throws -> String {
                let bought = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false])
                return try await api.submit([
                    "customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String),
                ])
            }
            let first = try await submit("ada@example.com")
            try await eventually("the first job to meet Apple's 429") {
                let document = try await api.call(.GET, "/v1/jobs/\(first)").json
                return (document["lastError"] as? String)?.contains("429") == true
            }
            let pausedAt = Date()
            let second = try await submit("ben@example.com")
            let firstDone = try await api.finished(first)
            let secondDone = try await api.finished(second)
            #expect(firstDone["status"] as? String == "succeeded" && secondDone["status"] as? String == "succeeded")
            #expect(secondDone["attempt"] as? Int == 1, "waiting for Apple spends no attempt: \(secondDone)")
            // The second asked Apple only once the pause was over (Apple's Retry-After, about 3 s after the 429).
            let finished = try #require(secondDone["finishedAt"] as? Double)
            #expect(Date(timeIntervalSince1970: finished / 1000).timeIntervalSince(pausedAt) > 1.5, "\(secondDone)")
            #expect((secondDone["result"] as? [String: Any])?["provisional"] == nil)
        }
    }
}
