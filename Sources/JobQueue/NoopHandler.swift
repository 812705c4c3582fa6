import Foundation
import RedisClient

/// The built-in `noop` job, for benchmarks, smoke checks and operators.
///
/// Payload `{"sleepMs": N, "failTimes": K, "effect": "NAME"}`, every field optional:
/// sleeps N ms; fails its first K attempts with a retryable error; with `effect`, applies
/// an effect at most once per job id (counted in `PREFIX:{Q}:effects:NAME`, fields
/// `applied` and `runs`), which is how the crash test proves exactly-once effects.
/// The result is `{"ok": true, "startedUs": T}` (plus `"applied"` with an effect), T being
/// when the handler began, in µs since the epoch, for pickup-latency benchmarks.
package struct NoopHandler: JobHandler {
    struct Payload: Decodable {
        var sleepMs: Int?
        var failTimes: Int?
        var effect: String?
    }

    package init() {}

    package func handle(_ job: JobContext) async throws -> String? {
        // When the handler began, in µs since the epoch: benchmarks read pickup latency from it.
        let startedMicros = Int64(Date().timeIntervalSince1970 * 1_000_000)
        var payload = Payload()
        do {
            // The common benchmark payload needs no decoder.
            if job.payload != "{}" { payload = try JSONDecoder().decode(Payload.self, from: Data(job.payload.utf8)) }
        } catch {
            throw JobFailure.permanent("invalidPayload", "noop takes {\"sleepMs\": N, \"failTimes\": K, \"effect\": NAME}")
        }
        if let sleepMs = payload.sleepMs, sleepMs > 0 { try await Task.sleep(for: .milliseconds(sleepMs)) }
        if let failTimes = payload.failTimes, job.attempt <= failTimes {
            throw JobFailure.retryable("requestedFailure", "noop fails attempt \(job.attempt) of its first \(failTimes) as asked")
        }
        var applied = false
        if let effect = payload.effect {
            try EnqueueRequest.validateName(effect, what: "effect name")
            let hash = job.keys.effects(effect)
            applied =
                try await job.redis.run(QueueScripts.applyEffectOnce, keys: [hash, hash + ":" + job.id], arguments: ["604800000"]).int == 1
        }
        let effect = payload.effect == nil ? "" : #","applied":\#(applied)"#
        return #"{"ok":true\#(effect),"startedUs":\#(startedMicros)}"#
    }
}
