import ArgumentParser
import Foundation
import JobQueue

/// `entitle queues`: a table (or JSON) of every known queue.
struct QueuesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "queues", abstract: "Show queue depths and counters.")

    @OptionGroup var options: RedisOptions

    @Flag(help: "Print {\"queues\": [...]} as JSON.")
    var json = false

    func run() async throws {
        let logger = options.makeLogger("entitle.queues")
        let jobQueue = try options.makeJobQueue(logger: logger)
        defer { jobQueue.redis.close() }
        var all: [QueueStats] = []
        for queue in try await jobQueue.knownQueues() { all.append(try await jobQueue.stats(queue: queue)) }
        if json {
            print(try JSONOutput.line(["queues": all.map(Self.object)]))
            return
        }
        let header = [
            "QUEUE", "PENDING", "SCHEDULED", "ACTIVE", "DEAD", "OLDEST(s)", "CONSUMERS", "ENQUEUED", "SUCCEEDED", "RETRIED", "FAILED",
            "REAPED", "NODE",
        ]
        let rows = all.map { stats in
            [
                stats.name, "\(stats.pending)", "\(stats.scheduled)", "\(stats.active)", "\(stats.dead)",
                String(format: "%.1f", stats.oldestPendingAgeSeconds), "\(stats.consumers)", "\(stats.total("enqueued"))",
                "\(stats.total("succeeded"))", "\(stats.total("retried"))", "\(stats.total("dead"))", "\(stats.counters["reaped"] ?? 0)",
                stats.node ?? "?",
            ]
        }
        print(Table.render(header: header, rows: rows))
        if all.isEmpty { print("(no queues yet)") }
    }

    static func object(_ stats: QueueStats) -> [String: Any] {
        var byType: [String: Any] = [:]
        for type in stats.jobTypes {
            byType[type] = [
                "enqueued": stats.counters["enqueued:\(type)"] ?? 0, "succeeded": stats.counters["succeeded:\(type)"] ?? 0,
                "retried": stats.counters["retried:\(type)"] ?? 0, "failed": stats.counters["dead:\(type)"] ?? 0,
            ]
        }
        return [
            "name": stats.name, "pending": stats.pending, "scheduled": stats.scheduled, "active": stats.active, "dead": stats.dead,
            "oldestPendingAgeSeconds": stats.oldestPendingAgeSeconds, "consumers": stats.consumers,
            "enqueued": stats.total("enqueued"), "succeeded": stats.total("succeeded"), "retried": stats.total("retried"),
            "failed": stats.total("dead"), "reaped": stats.counters["reaped"] ?? 0, "byType": byType,
            "node": stats.node ?? NSNull(),
        ]
    }
}

enum Table {
    static func render(header: [String], rows: [[String]]) -> String {
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        return ([header] + rows).map { row in
            row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}
