import ArgumentParser
import DurationUnits
import Foundation
import JobQueue
import RedisClient

/// `entitle enqueue TYPE`: adds jobs and prints their ids.
struct EnqueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "enqueue", abstract: "Enqueue jobs and print their ids, one a line.")

    @OptionGroup var options: RedisOptions

    @Argument(help: "The job type, e.g. noop.")
    var type: String

    @Option(help: "The payload, JSON.")
    var payload: String = "{}"

    @Option(help: "How many identical jobs to enqueue (in bulk).")
    var count: Int = 1

    @Option(help: "Idempotency key: a repeat returns the first job's id.")
    var idempotencyKey: String?

    @Option(help: "Run no earlier than this many seconds from now.")
    var delay: Double?

    @Option(help: "The queue.")
    var queue: String = "default"

    @Option(help: "Attempts before the job goes dead (0: the job type's default).")
    var maxAttempts: Int = 0

    @Flag(help: "Print no ids; print the count and enqueue rate to standard error instead.")
    var quiet = false

    func validate() throws {
        guard (1...10_000_000).contains(count) else { throw ValidationError("--count must be 1-10000000") }
        if let delay, !(0...Self.maximumDelay).contains(delay) {
            throw ValidationError("--delay must be 0 to \(Int(Self.maximumDelay)) seconds (a year)")
        }
        if idempotencyKey != nil && count > 1 {
            throw ValidationError("--idempotency-key names one job; it cannot go with --count above 1")
        }
        do {
            try request.validate()
        } catch let error as JobQueueError {
            throw ValidationError(error.message)
        }
    }

    /// A year: a job scheduled further out is more likely a mistake than a plan.
    static let maximumDelay: Double = 366 * 86_400

    var request: EnqueueRequest {
        var request = EnqueueRequest(
            type: type, payload: payload, queue: queue, idempotencyKey: idempotencyKey,
            delay: delay.map { .milliseconds(Int64($0 * 1000)) }, maxAttempts: maxAttempts
        )
        // A key names one request: the same key with another payload is a mistake, not a repeat.
        request.repeatMustMatch = true
        return request
    }

    func run() async throws {
        let logger = options.makeLogger("entitle.enqueue")
        let jobQueue = try options.makeJobQueue(logger: logger)
        defer { jobQueue.redis.close() }
        let clock = ContinuousClock()
        let began = clock.now
        var remaining = count
        while remaining > 0 {
            let chunk = min(remaining, 10_000)
            let results: [EnqueueResult]
            do {
                results = try await jobQueue.enqueue(batch: Array(repeating: request, count: chunk))
            } catch let error as JobQueueError where error.code == .partiallyEnqueued {
                // Print what did go in, so the caller knows exactly which jobs exist.
                let enqueued = error.enqueued.compactMap { $0 }
                if !quiet && !enqueued.isEmpty { print(enqueued.map(\.id).joined(separator: "\n")) }
                throw CommandFailure(
                    "entitle enqueue: \(count - remaining + enqueued.count) of \(count) jobs were enqueued (ids printed), then Redis failed: \(error.message)"
                )
            }
            if let mismatch = results.first(where: { $0.outcome == .mismatch }) {
                throw CommandFailure(
                    "entitle enqueue: idempotency key \(idempotencyKey ?? "") names job \(mismatch.id), whose payload is not this one; nothing was enqueued"
                )
            }
            if !quiet { print(results.map(\.id).joined(separator: "\n")) }
            remaining -= chunk
        }
        if quiet {
            let seconds = (clock.now - began).seconds
            FileHandle.standardError.write(
                Data(String(format: "enqueued %d jobs in %.6f s (%.0f jobs/s)\n", count, seconds, Double(count) / seconds).utf8))
        }
    }
}
