import Entitlements
import Foundation
import JobQueue
import RedisClient

/// Imports: the lines of a publisher's file queued as `receipt` jobs (one per line, each
/// with its own idempotency key, so an interrupted import run again queues nothing twice),
/// with what became of each line read back from the jobs. Kept 30 days under
/// `{prefix}:ent:P:import:ID` (a hash: lines, refused, createdAt, webhooks), `...:jobs` (a
/// list: each queued line's number and job id) and `...:refused` (a hash: line, message).
package struct Imports: Sendable {
    let jobQueue: JobQueue
    let keys: EntitlementKeys

    /// How long an import's record is kept.
    static let retention = 30 * 86_400
    /// Lines queued per round trip.
    static let batch = 1000

    package init(jobQueue: JobQueue) {
        self.jobQueue = jobQueue
        self.keys = EntitlementKeys(prefix: jobQueue.configuration.prefix)
    }

    /// What an import queued.
    package struct Summary: Sendable, Codable {
        package var importId: String
        package var queued: Int
        package var refused: [Refusal]
    }

    package struct Refusal: Sendable, Codable, Hashable {
        package var line: Int
        package var message: String
    }

    /// What became of an import's lines so far.
    package struct Progress: Sendable, Codable {
        package var importId: String
        package var lines: Int
        /// Applied (the job succeeded and the purchase is the customer's).
        package var done: Int
        /// The job failed, or Apple's answer refused the claim (`reason`): the first 100 with why.
        package var failed: Int
        package var failures: [Refusal]
        /// Not yet run (queued, scheduled, running or retrying).
        package var pending: Int
        /// Lines that were malformed and not queued: the first 100.
        package var refused: Int
        package var refusals: [Refusal]
        /// Job records gone (an import older than the results' 24 hours): counted apart.
        package var expired: Int
    }

    func key(_ publisher: String, _ id: String, _ part: String = "") -> String { keys.importRecord(publisher, id, part) }

    /// Queues an import's lines (its id the digest of the file's text).
    package func start(text: String, publisher: Publisher, webhooks: Bool, queue: String) async throws -> Summary {
        let id = ImportFile.id(of: text)
        let parsed = ImportFile.parse(text, publisher: publisher)
        let refused = parsed.refused.map { Refusal(line: $0.line, message: $0.message) }
        // Nothing to import: nothing is written.
        guard !parsed.lines.isEmpty else { return Summary(importId: id, queued: 0, refused: refused) }
        var jobIds: [String] = []
        var start = 0
        while start < parsed.lines.count {
            let chunk = parsed.lines[start..<min(parsed.lines.count, start + Self.batch)]
            let requests = try chunk.map { line in
                try EnqueueRequest(
                    line.payload(publisher: publisher.id, webhooks: webhooks), queue: queue,
                    idempotencyKey: line.idempotencyKey(publisher: publisher.id))
            }
            jobIds += try await jobQueue.enqueue(batch: requests).map(\.id)
            start += chunk.count
        }
        // Written whole again on a rerun: the same lines name the same jobs.
        var commands: [[String]] = [
            // One key a command: a Redis Cluster holds them in different slots.
            ["DEL", key(publisher.id, id, ":jobs")], ["DEL", key(publisher.id, id, ":refused")],
            [
                "HSET", key(publisher.id, id), "lines", String(parsed.lines.count), "refused", String(refused.count), "webhooks",
                webhooks ? "1" : "0", "queue", queue, "createdAt", String(Int64(Date().timeIntervalSince1970 * 1000)),
            ],
        ]
        var position = 0
        while position < jobIds.count {
            let chunk = zip(parsed.lines[position...], jobIds[position...]).prefix(Self.batch)
            commands.append(["RPUSH", key(publisher.id, id, ":jobs")] + chunk.map { "\($0.0.line):\($0.1)" })
            position += Self.batch
        }
        if !refused.isEmpty {
            commands.append(["HSET", key(publisher.id, id, ":refused")] + refused.flatMap { [String($0.line), $0.message] })
        }
        for part in ["", ":jobs", ":refused"] { commands.append(["EXPIRE", key(publisher.id, id, part), String(Self.retention)]) }
        // One hash tag would put them in one slot; each command names one key, so a Cluster takes them as they are.
        for command in commands { _ = try await jobQueue.redis.send(command) }
        return Summary(importId: id, queued: jobIds.count, refused: refused)
    }

    /// What became of an import's lines; nil for an import this publisher does not have.
    package func progress(publisher: String, id: String) async throws -> Progress? {
        let header = try await jobQueue.redis.send(["HMGET", key(publisher, id), "lines", "queue"]).array ?? []
        guard header.count == 2, let lines = header[0].string.flatMap({ Int($0) }), let queue = header[1].string else { return nil }
        let entries = try await jobQueue.redis.send(["LRANGE", key(publisher, id, ":jobs"), "0", "-1"]).array?.compactMap(\.string) ?? []
        let refusedMap = try await jobQueue.redis.send(["HGETALL", key(publisher, id, ":refused")]).fieldValues
        var progress = Progress(
            importId: id, lines: lines, done: 0, failed: 0, failures: [], pending: 0, refused: refusedMap.count,
            refusals: refusedMap.map { Refusal(line: Int($0.key) ?? 0, message: $0.value) }.sorted { $0.line < $1.line }.prefix(100)
                .map { $0 }, expired: 0)
        let pairs = entries.map { entry -> (line: Int, job: String) in
            let parts = entry.split(separator: ":", maxSplits: 1)
            return (Int(parts.first ?? "") ?? 0, parts.count > 1 ? String(parts[1]) : "")
        }
        let records = try await jobQueue.outcomes(ids: pairs.map(\.job), queue: queue)
        for (pair, record) in zip(pairs, records) {
            guard let record else {
                progress.expired += 1
                continue
            }
            switch record.status {
            case .succeeded:
                let result = record.result.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                let reason = (result?["reason"] as? String).map { reason in
                    reason + ((result?["message"] as? String).map { ": " + $0 } ?? "")
                }
                if let reason {
                    progress.failed += 1
                    if progress.failures.count < 100 { progress.failures.append(Refusal(line: pair.line, message: reason)) }
                } else {
                    progress.done += 1
                }
            case .failed:
                progress.failed += 1
                if progress.failures.count < 100 {
                    progress.failures.append(Refusal(line: pair.line, message: record.lastError ?? "failed"))
                }
            default:
                progress.pending += 1
            }
        }
        return progress
    }
}
