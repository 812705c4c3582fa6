import DurationUnits
import Foundation
import Logging
import RedisClient
import ServiceLifecycle

/// A day of queue figures at minute resolution, for charts that have history at first sight:
/// one sample a minute for every queue, written by whichever process gets there first that
/// minute (the others find it written), kept for `minutes` minutes.
///
/// Keys (one Redis Cluster slot): `{prefix}:{metrics}:minutes` (list of JSON samples, newest
/// first) and `{prefix}:{metrics}:last` (the minute last written).
public struct QueueHistory: Sendable {
    public let jobQueue: JobQueue
    /// How many samples are kept: a day.
    public static let minutes = 1_440

    public init(jobQueue: JobQueue) { self.jobQueue = jobQueue }

    /// One minute: each queue's figures then.
    public struct Sample: Sendable, Hashable, Codable {
        /// The minute's start, ms since 1970.
        public var at: Int64
        public var queues: [String: QueueFigures]
    }

    /// What a chart of a queue needs: its depths then, and its counters (summed over job
    /// types) so that a rate is the difference between two samples.
    public struct QueueFigures: Sendable, Hashable, Codable {
        public var pending: Int
        public var scheduled: Int
        public var active: Int
        public var dead: Int
        public var oldestPendingAgeSeconds: Double
        public var enqueued: Int
        public var succeeded: Int
        public var retried: Int
        public var failed: Int

        public init(_ stats: QueueStats) {
            func sum(_ prefix: String) -> Int { stats.counters.filter { $0.key.hasPrefix(prefix + ":") }.reduce(0) { $0 + $1.value } }
            pending = stats.pending
            scheduled = stats.scheduled
            active = stats.active
            dead = stats.dead
            oldestPendingAgeSeconds = stats.oldestPendingAgeSeconds
            enqueued = sum("enqueued")
            succeeded = sum("succeeded")
            retried = sum("retried")
            failed = sum("dead")
        }
    }

    var listKey: String { "\(jobQueue.configuration.prefix):{metrics}:minutes" }
    var lastKey: String { "\(jobQueue.configuration.prefix):{metrics}:last" }

    /// Pushes the sample unless this minute (or a later one) was written already.
    static let push = RedisScript(
        name: "queue-history-push",
        source: """
            local last = tonumber(redis.call('GET', KEYS[2]) or '-1')
            if last >= tonumber(ARGV[1]) then return 0 end
            redis.call('SET', KEYS[2], ARGV[1])
            redis.call('LPUSH', KEYS[1], ARGV[2])
            redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
            return 1
            """)

    /// Writes the sample of the minute `date` is in, unless a process did; whether this one did.
    @discardableResult
    public func record(at date: Date = Date()) async throws -> Bool {
        let minute = Int64((date.timeIntervalSince1970 / 60).rounded(.down))
        let last = try await jobQueue.redis.send(["GET", lastKey]).string.flatMap { Int64($0) } ?? -1
        guard last < minute else { return false }
        var queues: [String: QueueFigures] = [:]
        for queue in try await jobQueue.knownQueues() { queues[queue] = QueueFigures(try await jobQueue.stats(queue: queue)) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let sample = String(decoding: try encoder.encode(Sample(at: minute * 60_000, queues: queues)), as: UTF8.self)
        let written = try await jobQueue.redis.run(
            Self.push, keys: [listKey, lastKey], arguments: [String(minute), sample, String(Self.minutes)])
        return written.int == 1
    }

    /// The samples kept, oldest first.
    public func samples() async throws -> [Sample] {
        let reply = try await jobQueue.redis.send(["LRANGE", listKey, "0", String(Self.minutes - 1)])
        let decoder = JSONDecoder()
        return (reply.array ?? []).compactMap(\.string).reversed().compactMap { try? decoder.decode(Sample.self, from: Data($0.utf8)) }
    }
}

/// Records the queue history once a minute (every worker process runs one; one writes).
public struct QueueHistoryRecorder: Service, CustomStringConvertible {
    let history: QueueHistory
    let interval: Duration
    let logger: Logger

    public init(jobQueue: JobQueue, interval: Duration = .seconds(10), logger: Logger) {
        self.history = QueueHistory(jobQueue: jobQueue)
        self.interval = interval
        self.logger = logger
    }

    public var description: String { "QueueHistoryRecorder(interval: \(interval))" }

    public func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await history.record()
            } catch {
                logger.debug("the queue history sample was not written", metadata: ["error": "\(error)"])
            }
            // Checked more often than once a minute, so a minute is not missed; written once.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
