import ArgumentParser
import Foundation
import JobQueue

/// `entitle jobs show ID`.
struct JobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "jobs", abstract: "Inspect jobs.", subcommands: [Show.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one job's status and result.")

        @OptionGroup var options: RedisOptions

        @Argument(help: "The job id.")
        var id: String

        @Option(help: "The job's queue (default: look in every known queue).")
        var queue: String?

        @Flag(help: "Print JSON: {\"id\", \"type\", \"status\", \"attempt\", \"result\", ...}.")
        var json = false

        @Flag(help: "Include the payload (it may hold receipts and signed transactions: keep it out of logs).")
        var payload = false

        func run() async throws {
            let logger = options.makeLogger("entitle.jobs")
            let jobQueue = try options.makeJobQueue(logger: logger)
            defer { jobQueue.redis.close() }
            guard let job = try await jobQueue.job(id: id, queue: queue) else {
                throw CommandFailure("no job \(id) (never enqueued, or its record expired)")
            }
            if json {
                print(try JSONOutput.line(encoding: job.document(includingPayload: payload)))
            } else {
                print(Self.text(job))
            }
        }

        static func text(_ job: JobRecord) -> String {
            var lines = [
                "id:        \(job.id)", "type:      \(job.type)", "queue:     \(job.queue)", "status:    \(job.status.rawValue)",
                "attempt:   \(job.attempt) of \(job.maxAttempts == 0 ? "type default" : String(job.maxAttempts))",
            ]
            if let error = job.lastError { lines.append("lastError: \(error)") }
            if let result = job.result { lines.append("result:    \(result)") }
            return lines.joined(separator: "\n")
        }
    }
}
