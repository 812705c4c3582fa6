import ArgumentParser
import EntitleCore
import EntitlementJobs
import Entitlements
import Foundation
import Logging
import RedisClient
import Reporting

/// `entitle report`: a publisher's figures, as `GET /v1/reports/{metric}` gives them;
/// `entitle report rebuild`: the figures folded again from the event log.
struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report", abstract: "A publisher's reports (MRR, subscriptions, trials, churn, revenue, refunds, credits).",
        subcommands: [Show.self, Rebuild.self], defaultSubcommand: Show.self)

    /// The options both take: Redis, the catalog, the publisher.
    struct Target: ParsableArguments {
        @OptionGroup var options: RedisOptions

        @Option(help: "The publisher id.")
        var publisher: String

        @Option(
            help: """
                The publishers' catalog (default: $ENTITLE_CATALOG; with ENTITLE_ENV=development, \
                Config/catalog.development.json): the publisher's time zone.
                """)
        var catalog: String?

        func load() throws -> Publisher {
            return try WorkerCommand.publisher(publisher, catalog: catalog, why: "the publisher's time zone and offers are read from it")
        }

        func store(_ logger: Logger) throws -> (EntitlementStore, RedisConnectionPool) {
            let pool = RedisConnectionPool(
                configuration: try RedisConfiguration(url: options.redisURL), maximumConnections: 2, logger: logger)
            return (EntitlementStore(redis: pool, prefix: options.keyPrefix, logger: logger), pool)
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show", abstract: "Print figures over a range of days (the default subcommand).",
            discussion: """
                Metrics: \(ReportMetric.allCases.map(\.rawValue).joined(separator: ", ")). Money is in milliunits of each \
                currency (never converted); running totals are their value at the end of each period, flows their sum.
                """)

        @OptionGroup var target: Target

        @Option(help: "The first day (yyyy-mm-dd, the publisher's time zone); 29 days before --to unless given.")
        var from: String?

        @Option(help: "The last day (yyyy-mm-dd); today unless given.")
        var to: String?

        @Option(help: "day, week, month (a series) or offer, storefront, product (a breakdown over the range).")
        var by: String?

        @Option(help: "production (the default: what Apple's reports count) or sandbox (TestFlight, App Review, Xcode).")
        var environment: String?

        @Option(name: .customLong("metric"), help: "A metric to show (repeat for several); a summary set unless given.")
        var metrics: [String] = []

        @Flag(help: "Print JSON.")
        var json = false

        @Flag(help: "Print CSV (metric,key,currency,value,environment).")
        var csv = false

        static let summary = ["activeSubscriptions", "mrr", "newTrials", "newPaidSubscriptions", "churned", "grossRevenue", "refunds"]

        func validate() throws {
            if json && csv { throw ValidationError("--json and --csv: choose one") }
        }

        func run() async throws {
            let publisher = try target.load()
            let calendar = ReportCalendar(publisher: publisher)
            let request: ReportRequest
            do throws(ReportRequest.Invalid) {
                request = try ReportRequest.parse(
                    metrics: metrics.isEmpty ? Self.summary : metrics, from: from, to: to, by: by, environment: environment,
                    today: calendar.day(of: Date()), calendar: calendar)
            } catch {
                throw ValidationError(error.message)
            }
            let logger = target.options.makeLogger("entitle.report")
            let (store, pool) = try target.store(logger)
            defer { pool.close() }
            let generation = try await store.reports.generation(publisher.id)
            let query = ReportQuery(
                calendar: calendar, source: store.reports.source(publisher.id, generation: generation), environment: request.environment)
            var results: [ReportResult] = []
            for metric in request.metrics {
                results.append(try await query.run(metric, from: request.from, to: request.to, by: request.grouping))
            }
            if json {
                print(try JSONOutput.line(encoding: Document(publisher: publisher.id, request: request, results: results)))
            } else if csv {
                // Each row names its environment, so that files of both can be told apart.
                print("metric,key,currency,value,environment")
                for result in results {
                    for point in result.points {
                        print(
                            "\(result.metric),\(point.key),\(point.currency ?? ""),\(Self.number(point.value)),\(request.environment.rawValue)"
                        )
                    }
                }
            } else {
                print(Self.table(results, publisher: publisher.id, request: request))
            }
        }

        /// The JSON answer: each metric's points by its name.
        struct Document: Encodable {
            let publisher: String
            let request: ReportRequest
            let results: [ReportResult]

            enum Keys: String, CodingKey { case publisher, from, to, by, environment, metrics, units }

            struct Name: CodingKey {
                var stringValue: String
                var intValue: Int? { nil }
                init(stringValue: String) { self.stringValue = stringValue }
                init?(intValue: Int) { nil }
            }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Keys.self)
                try container.encode(publisher, forKey: .publisher)
                try container.encode(request.from.description, forKey: .from)
                try container.encode(request.to.description, forKey: .to)
                try container.encode(request.grouping.rawValue, forKey: .by)
                try container.encode(request.environment.rawValue, forKey: .environment)
                var metrics = container.nestedContainer(keyedBy: Name.self, forKey: .metrics)
                var units = container.nestedContainer(keyedBy: Name.self, forKey: .units)
                for result in results {
                    try metrics.encode(result.points, forKey: Name(stringValue: result.metric))
                    try units.encode(result.unit, forKey: Name(stringValue: result.metric))
                }
            }
        }

        static func number(_ value: Double) -> String {
            value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.4f", value)
        }

        static func table(_ results: [ReportResult], publisher: String, request: ReportRequest) -> String {
            var lines = [
                "publisher \(publisher), \(request.from) to \(request.to), by \(request.grouping.rawValue)"
                    + (request.environment == .production ? "" : ", \(request.environment.rawValue) purchases")
            ]
            for result in results {
                lines.append("")
                lines.append("\(result.metric) (\(result.unit))")
                for point in result.points {
                    lines.append("  \(point.key)\(point.currency.map { " \($0)" } ?? "")  \(number(point.value))")
                }
                if result.points.isEmpty { lines.append("  (nothing)") }
            }
            return lines.joined(separator: "\n")
        }
    }

    struct Rebuild: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rebuild", abstract: "Fold the publisher's event log again, from its first entry, and compare.",
            discussion: """
                Folds every entry the log holds into a new generation of figures and compares it with the figures in use \
                (brought up to the same entries). With --use the new generation replaces them. Exits 1 when they differ \
                (both are printed). Raw events older than the publisher's eventRetentionDays are gone from the log: a rebuild \
                covers what it still holds.
                """)

        @OptionGroup var target: Target

        @Flag(help: "Replace the figures in use with the rebuilt ones.")
        var use = false

        @Flag(help: "Print JSON.")
        var json = false

        func run() async throws {
            let publisher = try target.load()
            let logger = target.options.makeLogger("entitle.report")
            let (store, pool) = try target.store(logger)
            defer { pool.close() }
            let folder = ReportFolder(
                store: store, catalog: try EntitlementCatalog(publishers: [publisher]), interval: .seconds(1), logger: logger)
            let differences = try await folder.rebuild(publisher, use: use)
            if json {
                print(try JSONOutput.line(["publisher": publisher.id, "differences": differences, "used": use]))
            } else {
                print(
                    differences.isEmpty
                        ? "the figures rebuilt from the log equal those in use" + (use ? "; the rebuilt ones are now in use" : "")
                        : differences.joined(separator: "\n"))
            }
            if !differences.isEmpty { throw ExitCode(1) }
        }
    }
}
