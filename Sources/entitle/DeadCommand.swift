import ArgumentParser
import JobQueue

/// `entitle dead list|retry|purge`.
struct DeadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dead", abstract: "List, retry or purge dead jobs.", subcommands: [List.self, Retry.self, Purge.self]
    )

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List dead jobs, newest first.")
        @OptionGroup var options: RedisOptions
        @Option(help: "Only this queue (default: every known queue).") var queue: String?
        @Option(help: "At most this many per queue.") var limit: Int = 100
        @Flag(help: "Print {\"jobs\": [...]} as JSON.") var json = false

        func run() async throws {
            let logger = options.makeLogger("entitle.dead")
            let jobQueue = try options.makeJobQueue(logger: logger)
            defer { jobQueue.redis.close() }
            var jobs: [JobRecord] = []
            for name in try await DeadCommand.queues(queue, jobQueue) { jobs += try await jobQueue.deadJobs(queue: name, limit: limit) }
            if json {
                print(try JSONOutput.line(encoding: ["jobs": jobs.map { $0.document() }]))
            } else {
                print(
                    Table.render(
                        header: ["ID", "QUEUE", "TYPE", "ATTEMPT", "LAST ERROR"],
                        rows: jobs.map {
                            [$0.id, $0.queue, $0.type, "\($0.attempt)", String(($0.lastError ?? "").prefix(80))]
                        }))
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send dead jobs back to their queue with fresh attempts.")
        @OptionGroup var options: RedisOptions
        @OptionGroup var selection: Selection

        func run() async throws {
            try await selection.apply(options, done: "requeued") { try await $0.retryDead(queue: $1, ids: $2) }
        }
    }

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete dead jobs and their records.")
        @OptionGroup var options: RedisOptions
        @OptionGroup var selection: Selection

        func run() async throws {
            try await selection.apply(options, done: "purged") { try await $0.purgeDead(queue: $1, ids: $2) }
        }
    }

    struct Selection: ParsableArguments {
        @Option(help: "Only this queue (default: every known queue).") var queue: String?
        @Flag(help: "Every dead job.") var all = false
        @Argument(help: "Dead job ids.") var ids: [String] = []

        func validate() throws {
            if all == !ids.isEmpty { throw ValidationError("name dead job ids, or --all (not both)") }
        }

        /// Runs `action` on the selected dead jobs of each selected queue and reports the total.
        func apply(
            _ options: RedisOptions, done: String, _ action: (JobQueue, String, [String]?) async throws -> Int
        ) async throws {
            let jobQueue = try options.makeJobQueue(logger: options.makeLogger("entitle.dead"))
            defer { jobQueue.redis.close() }
            var total = 0
            for name in try await DeadCommand.queues(queue, jobQueue) { total += try await action(jobQueue, name, all ? nil : ids) }
            print("\(done) \(total) dead job(s)")
            if total == 0 && !all { throw CommandFailure("no such dead job") }
        }
    }

    static func queues(_ queue: String?, _ jobQueue: JobQueue) async throws -> [String] {
        if let queue { return [queue] }
        return try await jobQueue.knownQueues()
    }
}
