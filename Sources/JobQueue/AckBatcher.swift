import DurationUnits
import Logging
import RedisClient

/// Records finished jobs for one consumer, many per `finish` script call: while one call
/// is on the wire, the outcomes that arrive wait and go together in the next (group
/// commit), so a busy consumer pays one round trip per batch, an idle one no extra wait.
actor AckBatcher {
    struct Outcome: Sendable {
        enum Kind: String, Sendable { case ok, retry, deferred = "defer", dead }
        var id: String
        var lease: String
        var type: String
        var kind: Kind
        /// The result JSON (ok) or the error text (retry, dead).
        var data: String
        var retryAt: Int64 = 0
        /// `data` is a result `StoredResult` packed: `finish` keeps it in pieces.
        var packed = false
    }

    private let connection: RedisDedicatedConnection
    private let keys: QueueKeys
    private let activeKey: String
    private let configuration: JobQueueConfiguration
    private let logger: Logger
    private var waiting: [(Outcome, CheckedContinuation<Bool, Never>)] = []
    private var flushing = false
    static let maxBatch = 256

    init(connection: RedisDedicatedConnection, keys: QueueKeys, consumer: String, configuration: JobQueueConfiguration, logger: Logger) {
        self.connection = connection
        self.keys = keys
        self.activeKey = keys.active(consumer)
        self.configuration = configuration
        self.logger = logger
    }

    /// Records the outcome; returns `false` when the lease was lost (the job was reaped or
    /// requeued, and someone else owns it now). A call sent again after its reply was lost,
    /// whose first sending had recorded the outcome, counts as recorded.
    func record(_ outcome: Outcome) async -> Bool {
        await withCheckedContinuation { continuation in
            waiting.append((outcome, continuation))
            if !flushing {
                flushing = true
                Task { await self.flush() }
            }
        }
    }

    private func flush() async {
        while !waiting.isEmpty {
            let batch = Array(waiting.prefix(Self.maxBatch))
            waiting.removeFirst(batch.count)
            var arguments = [
                String(JobQueue.nowMilliseconds()), String(configuration.resultTTL.milliseconds),
                String(configuration.deadTTL.milliseconds), keys.finished,
            ]
            arguments.reserveCapacity(4 + batch.count * 6)
            var jobKeys = [activeKey, keys.scheduled, keys.dead, keys.stats]
            jobKeys.reserveCapacity(4 + batch.count)
            for (outcome, _) in batch {
                jobKeys.append(keys.job(outcome.id))
                arguments.append(contentsOf: [
                    outcome.id, outcome.lease, outcome.type, outcome.packed && outcome.kind == .ok ? "okz" : outcome.kind.rawValue,
                    outcome.data, String(outcome.retryAt),
                ])
            }
            let replies = await write(keys: jobKeys, arguments: arguments)
            for (index, (_, continuation)) in batch.enumerated() {
                // 1: recorded now; 2: recorded by an earlier sending of this batch.
                let code = replies.flatMap { index < $0.count ? $0[index].int : nil } ?? 0
                continuation.resume(returning: code == 1 || code == 2)
            }
        }
        flushing = false
    }

    /// Writes one batch, retrying through connection failures for up to a minute; after that
    /// the jobs stay in the active list, where shutdown or the reaper finds them.
    private func write(keys jobKeys: [String], arguments: [String]) async -> [RedisReply]? {
        let clock = ContinuousClock()
        let giveUp = clock.now + .seconds(60)
        var delay = Duration.milliseconds(10)
        while true {
            do {
                return try await connection.run(QueueScripts.finish, keys: jobKeys, arguments: arguments).array
            } catch {
                guard clock.now < giveUp else {
                    logger.error("could not record finished jobs", metadata: ["error": "\(error)"])
                    return nil
                }
                logger.warning("recording finished jobs failed; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(1))
            }
        }
    }
}
