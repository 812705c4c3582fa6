import EntitleCore
import Entitlements
import Foundation
import Logging
import Metrics
import Reporting
import ServiceLifecycle

/// Keeps the reports up to date from the event log: every `interval`, each partition of each
/// publisher's log is folded from where its cursor stands (`ReportFold`), the increments and
/// the new cursor written in one script (`ReportStore.apply`), so no entry counts twice even
/// when a folder dies between reading and writing. Every worker process runs one; a lease per
/// partition keeps them from doing the same work, and the cursor keeps them right if two do.
package struct ReportFolder: Service, CustomStringConvertible {
    package let log: EventLog
    package let reports: ReportStore
    let catalog: EntitlementCatalog
    let interval: Duration
    let logger: Logger
    /// Who holds a lease: this process.
    let holder: String

    /// Entries the fold could not read (written by a newer version): skipped, never stuck on.
    static let unreadableEntries = Counter(label: "entitle_report_unreadable_entries_total")

    package init(store: EntitlementStore, catalog: EntitlementCatalog, interval: Duration, logger: Logger) {
        self.log = store.log
        self.reports = store.reports
        self.catalog = catalog
        self.interval = interval
        self.logger = logger
        self.holder = "\(ProcessInfo.processInfo.hostName):\(getpid()):\(UUID().uuidString.prefix(8))"
    }

    package var description: String { "ReportFolder(interval: \(interval))" }

    package func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            for publisher in catalog.publishers {
                do {
                    let generation = try await reports.generation(publisher.id)
                    try await fold(publisher, generation: generation)
                } catch {
                    logger.warning(
                        "folding the event log into reports failed", metadata: ["publisher": "\(publisher.id)", "error": "\(error)"])
                }
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }

    /// Folds each partition's new entries into `generation`, up to `heads` (the last entry of
    /// each partition to take; everything there is when `nil`). Returns the entries folded.
    @discardableResult
    package func fold(_ publisher: Publisher, generation: Int, until heads: [String]? = nil, batch: Int = 500) async throws -> Int {
        let fold = ReportFold(calendar: ReportCalendar(publisher: publisher))
        var folded = 0
        for partition in 0..<EntitlementKeys.partitions {
            guard try await reports.lease(publisher.id, generation: generation, partition: partition, holder: holder, for: .seconds(30))
            else { continue }
            var cursor = try await reports.cursors(publisher.id, generation: generation)[partition]
            while true {
                var entries = try await log.entries(publisher: publisher.id, partition: partition, after: cursor, count: batch)
                if let head = heads?[partition] { entries = entries.filter { !EventLog.isEarlier(head, than: $0.id) } }
                guard let last = entries.last else { break }
                var increments: [ReportIncrement] = []
                for (_, entry) in entries {
                    switch entry {
                    case .event(let event): increments += fold.increments(of: event)
                    case .delta(let delta, _): increments += fold.increments(of: delta)
                    case .unreadable: Self.unreadableEntries.increment()
                    }
                }
                let written = try await reports.apply(
                    ReportBucket.merge(increments), publisher: publisher.id, generation: generation, partition: partition, from: cursor,
                    to: last.id)
                if written {
                    folded += entries.count
                    cursor = last.id
                } else {
                    // Another folder moved the cursor: go on from where it stands.
                    cursor = try await reports.cursors(publisher.id, generation: generation)[partition]
                }
                if entries.count < batch, written { break }
            }
        }
        return folded
    }

    /// Folds the whole log into a new generation, up to what it holds now, and compares it
    /// with the generation in use (which is brought up to the same entries first): the
    /// figures that differ, by bucket and field (both equal: empty). With `use`, the new
    /// generation replaces the one in use; otherwise it is dropped.
    package func rebuild(_ publisher: Publisher, use: Bool) async throws -> [String] {
        let current = try await reports.generation(publisher.id)
        let next = current + 1
        try await reports.drop(publisher.id, generation: next)
        let heads = try await log.heads(publisher: publisher.id)
        try await fold(publisher, generation: next, until: heads)
        // The generation in use, up to the same entries (a worker's folder may hold a
        // partition's lease: then it gets there on its own).
        for _ in 0..<600 {
            try await fold(publisher, generation: current, until: heads)
            let cursors = try await reports.cursors(publisher.id, generation: current)
            if zip(cursors, heads).allSatisfy({ $1 == "0" || !EventLog.isEarlier($0, than: $1) }) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let old = try await reports.figures(publisher.id, generation: current)
        let new = try await reports.figures(publisher.id, generation: next)
        var differences: [String] = []
        for bucket in Set(old.keys).union(new.keys).sorted() {
            let before = old[bucket] ?? [:]
            let after = new[bucket] ?? [:]
            for field in Set(before.keys).union(after.keys).sorted() where before[field] != after[field] {
                differences.append("\(bucket) \(field): in use \(before[field] ?? 0), rebuilt \(after[field] ?? 0)")
            }
        }
        if use {
            try await reports.use(publisher.id, generation: next)
            try await reports.drop(publisher.id, generation: current)
        } else {
            try await reports.drop(publisher.id, generation: next)
        }
        return differences
    }
}
