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

    @Option(help: "How many identical jobs to enqueue (in bulk: batches of 10,000, two at a time, which may interleave in the queue).")
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

    /// Jobs per `enqueue(batch:)` call (each is pipelined in script calls of 500).
    static let batchSize = 10_000

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
        // Two batches in flight: the next one is built and sent while Redis runs the one
        // before (on another connection), so the producer's work and the server's overlap.
        // Batches may interleave in the queue; the ids print in the order of the batches.
        var batches = stride(from: 0, to: count, by: Self.batchSize).map { min(Self.batchSize, count - $0) }.makeIterator()
        let request = request
        func send(_ size: Int) -> Task<[EnqueueResult], any Error> {
            Task { try await jobQueue.enqueue(batch: Array(repeating: request, count: size)) }
        }
        var inFlight = batches.next().map(send)
        var printed = 0
        // The first failure's text; no batch is sent after it.
        var failure: String?
        while let current = inFlight {
            let next = failure == nil ? batches.next().map(send) : nil
            let results: [EnqueueResult]
            do {
                results = try await current.value
            } catch let error as JobQueueError where error.code == .partiallyEnqueued {
                // Print what did go in, so the caller knows exactly which jobs exist.
                results = error.enqueued.compactMap { $0 }
                failure = failure ?? error.message
            } catch  where printed == 0 && next == nil {
                throw error  // nothing enqueued at all: the error as it came
            } catch {
                results = []
                failure = failure ?? "\(error)"
            }
            if let mismatch = results.first(where: { $0.outcome == .mismatch }) {
                throw CommandFailure(
                    "entitle enqueue: idempotency key \(idempotencyKey ?? "") names job \(mismatch.id), whose payload is not this one; nothing was enqueued"
                )
            }
            if !quiet && !results.isEmpty { print(results.map(\.id).joined(separator: "\n")) }
            printed += results.count
            inFlight = next
        }
        if let failure {
            throw CommandFailure(
                "entitle enqueue: \(printed) of \(count) jobs were enqueued (ids printed), then Redis failed: \(failure)")
        }
        if quiet {
            let seconds = (clock.now - began).seconds
            FileHandle.standardError.write(
                Data(String(format: "enqueued %d jobs in %.6f s (%.0f jobs/s)\n", count, seconds, Double(count) / seconds).utf8))
        }
    }
}
