import DurationUnits
import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import RedisTestSupport
import Testing

/// A subscription waiting for its next period costs its entry in the renewal index and no
/// job: the workers' sweep enqueues its check when it is due in App Store time, once however
/// many workers sweep, and the check puts the next one in the index.
@Suite struct RenewalScheduleTests {
    /// With the App Store's clock frozen, sam buys a monthly subscription (no offer) and
    /// claims it; its original transaction id.
    static func samSubscribes(_ api: APIStack) async throws -> String {
        try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
        let bought = try await api.buy("premium.monthly", extra: ["environment": "Production", "useIntroductoryOffer": false])
        _ = try await api.claim(["customer": "sam@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        try await api.settle()
        return try #require(bought["originalTransactionId"] as? String)
    }

    @Test(.timeLimit(.minutes(3))) func aRenewalCheckWaitsInTheIndexAndIsEnqueuedWhenDue() async throws {
        // No notification reaches Entitle: only a renewal check can see the renewal.
        try await APIStack.run("renewal-schedule", worker: true) { api in
            let original = try await Self.samSubscribes(api)

            let prefix = api.jobQueue.configuration.prefix
            let redis = api.jobQueue.redis
            let store = EntitlementStore(redis: redis, prefix: prefix, logger: TestRedis.logger)
            func subscription() async throws -> SubscriptionRecord {
                try #require(try await store.load(publisher: "demo", customer: "sam@example.com").state.subscriptions[original])
            }
            func due() async throws -> Int64? {
                try await redis.send(["ZSCORE", "\(prefix):ent:renewals", "demo/\(original)"]).string.flatMap(Double.init).map(Int64.init)
            }
            let first = try await subscription()
            let expires = try #require(first.expiresDate)
            let margin = api.settings.renewalCheckMargin.milliseconds
            #expect(try await due() == Int64((expires.timeIntervalSince1970 * 1000).rounded()) + margin)
            #expect(try await api.jobQueue.stats(queue: "default").scheduled == 0, "no delayed job waits out the period")

            // Two workers' sweeps, of two queues: nothing is due yet; then, past the due date,
            // one check, claimed by the first sweep that sees it.
            func sweep(_ queue: String) -> RenewalSweep {
                RenewalSweep(
                    service: EntitlementService(configuration: api.settings, jobQueue: api.jobQueue, logger: TestRedis.logger),
                    queue: queue, interval: .seconds(1), logger: TestRedis.logger)
            }
            let (one, two) = (sweep("default"), sweep("other"))
            #expect(try await one.sweep() == 0)
            #expect(try await two.sweep() == 0)
            let now = try #require(try await api.simulator("/simulator/clock")["now"] as? Double)
            try await api.advance(seconds: expires.timeIntervalSince1970 - now / 1000 + Double(margin) / 1000 + 1)
            #expect(try await one.sweep() == 1)
            #expect(try await two.sweep() == 0, "claimed by the first sweep")
            #expect(try await api.jobQueue.stats(queue: "other").pending == 0)
            try await api.settle()
            let stats = "\(prefix):{default}:stats"
            try await eventually("the renewal check's success to be counted") {
                Int(try await redis.send(["HGET", stats, "succeeded:renewal-check"]).string ?? "0") ?? 0 >= 1
            }
            #expect(Int(try await redis.send(["HGET", stats, "succeeded:renewal-check"]).string ?? "0") == 1, "one check for two sweeps")

            // The check saw the renewal and put the next check in the index, not in the queue.
            let renewed = try await subscription()
            let next = try #require(renewed.expiresDate)
            #expect(next > expires && renewed.latestTransactionId != first.latestTransactionId)
            #expect(try await due() == Int64((next.timeIntervalSince1970 * 1000).rounded()) + margin)
            #expect(try await api.jobQueue.stats(queue: "default").scheduled == 0)
            #expect(try await one.sweep() == 0)
        }
    }

    /// Checks that do not end (for a publisher taken out of the catalog, for a subscription
    /// nobody holds) never hold back the checks due after them: each sweep claims what it
    /// enqueues, moving it out of the way, and those checks drop their entries.
    @Test(.timeLimit(.minutes(3))) func checksThatDoNotEndDoNotHoldBackTheOthers() async throws {
        try await APIStack.run("renewal-starve", worker: true) { api in
            let original = try await Self.samSubscribes(api)
            let index = "\(api.jobQueue.configuration.prefix):ent:renewals"
            let redis = api.jobQueue.redis
            // Four entries due long before sam's: two of a publisher no longer in the catalog,
            // two of subscriptions nobody holds.
            for member in ["gone/1", "gone/2", "demo/nobody-1", "demo/nobody-2"] {
                try await redis.send(["ZADD", index, "1000", member])
            }
            let sweep = RenewalSweep(
                service: EntitlementService(configuration: api.settings, jobQueue: api.jobQueue, logger: TestRedis.logger),
                queue: "default", interval: .seconds(1), logger: TestRedis.logger)
            try await api.advance(seconds: 40 * 86_400)
            // Two at a time, one page a round: the stuck four first, then sam's.
            #expect(try await sweep.sweep(page: 2, pages: 1) == 2)
            #expect(try await sweep.sweep(page: 2, pages: 1) == 2)
            #expect(try await sweep.sweep(page: 2, pages: 1) == 1)
            try await api.settle()
            // The four are dropped from the index; sam's check ran and set the next one.
            try await eventually("the stuck entries dropped and sam's next check indexed") {
                let members = Set(try await redis.send(["ZRANGE", index, "0", "-1"]).array?.compactMap(\.string) ?? [])
                return members == ["demo/\(original)"]
            }
            let due = try #require(try await redis.send(["ZSCORE", index, "demo/\(original)"]).string.flatMap(Double.init))
            let now = try #require(try await api.simulator("/simulator/clock")["now"] as? Double)
            #expect(due > now, "the next check is due ahead, not leased")
        }
    }
}
