import ArgumentParser
import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import JobQueue

/// `entitle reconcile --publisher P [--since D] [--until D] [--wait S]`: queues the
/// publisher's `reconcile` job now (workers also queue it once per the publisher's
/// `reconcileIntervalSeconds`).
struct ReconcileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Bring in the notifications Apple sent that never arrived (Get Notification History); prints the job's id.",
        discussion: """
            Queues a reconcile job: a worker pages through Apple's Notification History for each of the publisher's apps \
            with an App Store Server API key and queues every notification not already applied, as if it had arrived. \
            Without --since it starts where the last reconcile ended (an hour before), or a week ago the first time; Apple \
            keeps 180 days (30 in the sandbox). One reconcile of a publisher runs at a time: while one runs, this prints \
            its id.
            """)

    @OptionGroup var options: RedisOptions

    @Option(help: "The publisher id.")
    var publisher: String

    @Option(help: "From this moment (ISO 8601, 2026-11-01T00:00:00Z, or a date, 2026-11-01, at 00:00 UTC).")
    var since: String?

    @Option(help: "Until this moment (same forms; default: now).")
    var until: String?

    @Option(help: "Wait up to this many seconds for the job and print its result (JSON); a failed job exits non-zero.")
    var wait: Double?

    @OptionGroup var target: CatalogOptions

    /// An ISO 8601 moment or a day (UTC midnight).
    static func moment(_ text: String, option: String) throws -> Date {
        let full = ISO8601DateFormatter()
        if let date = full.date(from: text) { return date }
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        if let date = day.date(from: text) { return date }
        throw ValidationError("--\(option) takes an ISO 8601 moment (2026-11-01T00:00:00Z) or a day (2026-11-01), not \(text)")
    }

    func run() async throws {
        let since = try self.since.map { try Self.moment($0, option: "since") }
        let until = try self.until.map { try Self.moment($0, option: "until") }
        if let since, let until, since >= until { throw ValidationError("--since must be before --until") }
        if let wait, !(0...3600).contains(wait) { throw ValidationError("--wait must be 0 to 3600 seconds") }
        let found = try WorkerCommand.publisher(publisher, catalog: target.catalog, why: "the publisher is checked against it")
        guard found.apps.contains(where: { $0.apiKey != nil }) || ProcessInfo.processInfo.environment["ENTITLE_ENV"] == "development"
        else {
            throw CommandFailure(
                "publisher \(publisher) has no app with an App Store Server API key (apiKey): Notification History needs one")
        }
        let logger = options.makeLogger("entitle.reconcile")
        let jobQueue = try options.makeJobQueue(logger: logger, connections: 1)
        defer { jobQueue.redis.close() }
        let request = try EnqueueRequest(
            JobPayloads.Reconcile(publisher: publisher, since: since, until: until), queue: target.queue,
            uniqueKey: ReconcileSchedule.uniqueKey(publisher))
        let result = try await jobQueue.enqueue(request)
        if result.outcome == .conflict {
            guard since == nil, until == nil else {
                throw CommandFailure(
                    "a reconcile of \(publisher) is under way (job \(result.id)); run this window again once it has finished")
            }
            FileHandle.standardError.write(Data("a reconcile of \(publisher) is under way: job \(result.id)\n".utf8))
        }
        guard let wait else {
            print(result.id)
            return
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(wait * 1000))
        while true {
            guard let job = try await jobQueue.job(id: result.id, queue: target.queue) else {
                throw CommandFailure("job \(result.id) is gone")
            }
            switch job.status {
            case .succeeded:
                print(job.result ?? "{}")
                return
            case .failed:
                throw CommandFailure("job \(result.id) failed: \(job.lastError ?? "")")
            default:
                guard ContinuousClock.now < deadline else {
                    throw CommandFailure("job \(result.id) has not finished; follow it with `entitle jobs show \(result.id)`")
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
