import ArgumentParser
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `entitle import --publisher P FILE` and `entitle import --status ID --publisher P`: a
/// publisher arriving with the customers it already has.
struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Queue one receipt job per line of FILE (prints the import's id and what was refused); --status ID follows one.",
        discussion: """
            FILE: CSV lines `customer,proof[,bundleId]` (a header line `customer,...` is skipped; the proof an original \
            transaction id, a signed transaction or a base64 app receipt) or JSON lines {"customer", \
            "originalTransactionId" | "signedTransaction" | "appReceipt", "bundleId"?}. Each line becomes a receipt job \
            through the publisher's own road, with its own idempotency key: the same file imported again queues nothing \
            twice. A malformed line is refused with its message and the rest is imported. The purchases' lifecycle events \
            are marked imported and not posted to the webhook unless --webhooks. `entitle import --status ID` says what \
            became of each line: done, failed (with why), pending, refused.
            """)

    @OptionGroup var options: RedisOptions
    @OptionGroup var target: CatalogOptions

    @Option(help: "The publisher id.")
    var publisher: String

    @Option(help: "Say what became of this import's lines instead of importing.")
    var status: String?

    @Flag(help: "Post the imported purchases' events to the publisher's webhook too.")
    var webhooks = false

    @Flag(help: "Print JSON.")
    var json = false

    @Argument(help: "The file (- for standard input).")
    var file: String?

    func validate() throws {
        guard (file == nil) != (status == nil) else { throw ValidationError("give FILE to import, or --status ID to follow an import") }
    }

    func run() async throws {
        let logger = options.makeLogger("entitle.import")
        if let status {
            let jobQueue = try options.makeJobQueue(logger: logger, connections: 1)
            defer { jobQueue.redis.close() }
            try await report(status, jobQueue: jobQueue)
            return
        }
        guard let file else { return }
        let publisher = try WorkerCommand.publisher(self.publisher, catalog: target.catalog, why: "the lines are checked against it")
        let data: Data
        do {
            data = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            throw CommandFailure("cannot read \(file): \(error.localizedDescription)")
        }
        guard let text = String(data: data, encoding: .utf8) else { throw CommandFailure("\(file) is not UTF-8 text") }
        let jobQueue = try options.makeJobQueue(logger: logger, connections: 2)
        defer { jobQueue.redis.close() }
        let summary = try await Imports(jobQueue: jobQueue).start(text: text, publisher: publisher, webhooks: webhooks, queue: target.queue)
        if json {
            print(try JSONOutput.line(try JSONSerialization.jsonObject(with: JSONEncoder().encode(summary))))
        } else {
            print("import \(summary.importId): \(summary.queued) lines queued, \(summary.refused.count) refused")
            for refusal in summary.refused.prefix(100) { print("  line \(refusal.line): \(refusal.message)") }
        }
        guard summary.queued > 0 else {
            throw CommandFailure(summary.refused.isEmpty ? "\(file) holds no line" : "no line of \(file) could be imported")
        }
    }

    func report(_ id: String, jobQueue: JobQueue) async throws {
        guard let progress = try await Imports(jobQueue: jobQueue).progress(publisher: publisher, id: id) else {
            throw CommandFailure("\(publisher) has no import \(id)")
        }
        if json {
            print(try JSONOutput.line(try JSONSerialization.jsonObject(with: JSONEncoder().encode(progress))))
            return
        }
        print(
            "import \(progress.importId): \(progress.lines) lines: \(progress.done) done, \(progress.failed) failed, "
                + "\(progress.pending) pending; \(progress.refused) refused" + (progress.expired > 0 ? ", \(progress.expired) expired" : "")
        )
        for failure in progress.failures { print("  line \(failure.line) failed: \(failure.message)") }
        for refusal in progress.refusals { print("  line \(refusal.line) refused: \(refusal.message)") }
    }
}
