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
/// when a folder dies between reading and writing. Every worker process runs one (unless
/// `--no-reports`); a lease per publisher keeps them from doing the same work, and the
/// cursors keep them right if two do.
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
        await everyRound(of: interval, logger: logger, failure: "folding the event log into reports failed") {
            // One publisher failing does not keep the others from being folded.
            for publisher in catalog.publishers {
                do {
                    let generation = try await reports.generation(publisher.id)
                    try await fold(publisher, generation: generation)
                } catch {
                    logger.warning(
                        "folding the event log into reports failed", metadata: ["publisher": "\(publisher.id)", "error": "\(error)"])
                }
            }
        }
    }

    /// Folds each partition's new entries into `generation`, up to `heads` (the last entry of
    /// each partition to take; everything there is when `nil`). One process folds a
    /// publisher at a time (a lease); each round reads every partition in one pipelined round
    /// trip, so an idle log costs three commands a round. Returns the entries folded.
    @discardableResult
    package func fold(_ publisher: Publisher, generation: Int, until heads: [String]? = nil, batch: Int = 500) async throws -> Int {
        guard try await reports.lease(publisher.id, generation: generation, holder: holder, for: .seconds(30)) else { return 0 }
        let fold = ReportFold(calendar: ReportCalendar(publisher: publisher))
        var cursors = try await reports.cursors(publisher.id, generation: generation)
        var folded = 0
        while true {
            var rounds = try await log.entries(publisher: publisher.id, after: cursors, count: batch)
            if let heads {
                for partition in rounds.indices { rounds[partition].removeAll { EventLog.isEarlier(heads[partition], than: $0.id) } }
            }
            guard rounds.contains(where: { !$0.isEmpty }) else { break }
            var more = false
            for (partition, entries) in rounds.enumerated() {
                guard let last = entries.last else { continue }
                var increments: [ReportIncrement] = []
                for (_, entry) in entries {
                    switch entry {
                    case .event(let event): increments += fold.increments(of: event)
                    case .delta(let delta, _): increments += fold.increments(of: delta)
                    case .unreadable: Self.unreadableEntries.increment()
                    }
                }
                let written = try await reports.apply(
                    ReportBucket.merge(increments), publisher: publisher.id, generation: generation, partition: partition,
                    from: cursors[partition], to: last.id)
                if written {
                    folded += entries.count
                    cursors[partition] = last.id
                    more = more || entries.count == batch
                } else {
                    // Another folder moved the cursor (its lease ran out under it): go on from there.
                    cursors[partition] = try await reports.cursors(publisher.id, generation: generation)[partition]
                    more = true
                }
            }
            if !more { break }
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
