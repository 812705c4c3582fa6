import EntitleCore
import Entitlements
import Foundation
import Logging
import RedisClient
import Reporting

/// `bench/reports.sh`: how fast a year's report answers for a publisher with 100,000
/// subscribers, and what the event log and the figures cost in Redis.
///
/// A year of 100,000 subscribers is made up (seeded): each starts on a day of the year, on one
/// of six products (weekly, monthly and yearly in two tiers), in one of 20 storefronts (their
/// currencies), 30 % with a free week first; each period renews unless the subscriber churns
/// (5 % a period; 1 % of those through billing retry, some refunded). Their lifecycle events and
/// pieces go through the real fold (`ReportFold`, `ReportBucket.merge`) into Redis by the real
/// script (`ReportStore.apply`), as a worker's folder writes them. Then, against that Redis:
/// - each query (a metric over the year by day, by month, by storefront) is run 30 times with
///   the real `ReportQuery` over `ReportStore`'s source, and its median and slowest printed;
/// - the figures' bytes (`MEMORY USAGE ... SAMPLES 0` of every bucket) per publisher-day;
/// - an event log's bytes per entry: 20,000 of the made-up events and deltas appended as the
///   store appends them (`XADD` of `EventLog`'s JSON), the stream's memory over its length.
///
/// usage: report-bench REDIS_URL [SUBSCRIBERS]
@main struct ReportBenchmark {
    static let products: [(id: String, offer: String, days: Double, prices: Int64)] = [
        ("news.weekly", "news", 7, 1_990), ("news.monthly", "news", 30.4, 6_990), ("news.yearly", "news", 365, 69_990),
        ("plus.weekly", "plus", 7, 2_990), ("plus.monthly", "plus", 30.4, 9_990), ("plus.yearly", "plus", 365, 99_990),
    ]
    static let storefronts: [(String, String)] = [
        ("USA", "USD"), ("CAN", "CAD"), ("GBR", "GBP"), ("FRA", "EUR"), ("DEU", "EUR"), ("ITA", "EUR"), ("ESP", "EUR"),
        ("NLD", "EUR"), ("BEL", "EUR"), ("CHE", "CHF"), ("AUT", "EUR"), ("SWE", "SEK"), ("NOR", "NOK"), ("DNK", "DKK"),
        ("JPN", "JPY"), ("AUS", "AUD"), ("NZL", "NZD"), ("BRA", "BRL"), ("MEX", "MXN"), ("IND", "INR"),
    ]

    static func main() async throws {
        let arguments = CommandLine.arguments
        guard arguments.count >= 2 else {
            FileHandle.standardError.write(Data("usage: report-bench REDIS_URL [SUBSCRIBERS]\n".utf8))
            exit(2)
        }
        let subscribers = arguments.count > 2 ? Int(arguments[2]) ?? 100_000 : 100_000
        let logger = Logger(label: "report-bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let redis = RedisConnectionPool(configuration: try RedisConfiguration(url: arguments[1]), maximumConnections: 4, logger: logger)
        let prefix = "report-bench-\(UUID().uuidString.prefix(8))"
        let reports = ReportStore(redis: redis, prefix: prefix)
        let calendar = ReportCalendar.utc
        let fold = ReportFold(calendar: calendar)
        let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01
        var random = SplitMix64(seed: 42)
        var pending: [ReportIncrement] = []
        var cursor = 0
        var events = 0
        var deltas = 0
        var sample: [(String, String)] = []
        let clock = ContinuousClock()
        let began = clock.now

        func flush() async throws {
            let next = cursor + 1
            let written = try await reports.apply(
                ReportBucket.merge(pending), publisher: "bench", generation: 1, partition: cursor % 16,
                from: cursor < 16 ? "0" : "\(cursor - 15)-0", to: "\(next)-0")
            guard written else { throw BenchError("the fold's cursor moved under it") }
            cursor = next
            pending.removeAll(keepingCapacity: true)
        }

        for index in 0..<subscribers {
            let product = products[Int(random.next() % 6)]
            let (storefront, currency) = storefronts[Int(random.next() % 20)]
            let customer = "c\(index)@example.com"
            var at = start.addingTimeInterval(Double(random.next() % 365) * 86_400 + 43_200)
            let end = start.addingTimeInterval(366 * 86_400)
            var transaction = 0
            func event(_ type: LifecycleEventType, _ date: Date, price: Int64?) -> LifecycleEvent {
                var event = LifecycleEvent(
                    id: "bench:\(customer):\(type.rawValue):\(index)-\(transaction)", type: type, publisher: "bench", customer: customer,
                    occurredAt: date, recordedAt: date)
                (event.productId, event.offerId, event.storefront, event.environment) = (
                    product.id, product.offer, storefront, "Production"
                )
                (event.transactionId, event.originalTransactionId) = ("\(index)-\(transaction)", "\(index)-0")
                if let price { (event.priceMilliunits, event.currency, event.priceSource) = (price, currency, .apple) }
                event.customerVersion = transaction + 1
                return event
            }
            func piece(_ phase: ReportPiece.Phase, _ from: Date, _ to: Date?) -> ReportPiece {
                ReportPiece(
                    phase: phase, from: from, to: to, productId: product.id, offerId: product.offer, storefront: storefront,
                    currency: currency, monthly: phase == .paying ? product.prices * 30 / Int64(max(1, product.days.rounded())) : nil)
            }
            var made: [(LifecycleEvent?, ReportDelta?)] = []
            if random.next() % 10 < 3 {
                let trialEnd = at.addingTimeInterval(7 * 86_400)
                made.append((event(.trialStarted, at, price: 0), ReportDelta(removed: [], added: [piece(.trial, at, nil)])))
                made.append((nil, ReportDelta(removed: [piece(.trial, at, nil)], added: [piece(.trial, at, trialEnd)])))
                at = trialEnd
                transaction += 1
            }
            var first = true
            while at < end {
                let periodEnd = at.addingTimeInterval(product.days * 86_400)
                let type: LifecycleEventType = first ? (transaction > 0 ? .trialConverted : .initialPurchase) : .renewal
                made.append((event(type, at, price: product.prices), ReportDelta(removed: [], added: [piece(.paying, at, periodEnd)])))
                first = false
                transaction += 1
                if random.next() % 100 < 5 {
                    if random.next() % 100 < 20 {
                        let retryEnd = periodEnd.addingTimeInterval(Double(1 + random.next() % 60) * 86_400)
                        made.append(
                            (
                                event(.billingIssue, periodEnd, price: nil),
                                ReportDelta(removed: [], added: [piece(.billingRetry, periodEnd, nil)])
                            ))
                        var expired = event(.expiration, retryEnd, price: nil)
                        expired.reason = "billing"
                        made.append(
                            (
                                expired,
                                ReportDelta(
                                    removed: [piece(.billingRetry, periodEnd, nil)], added: [piece(.billingRetry, periodEnd, retryEnd)])
                            ))
                    } else if random.next() % 100 < 10 {
                        let refunded = at.addingTimeInterval(product.days * 43_200)
                        var refund = event(.refund, refunded, price: product.prices)
                        refund.refundMilliunits = product.prices / 2
                        made.append((refund, ReportDelta(removed: [piece(.paying, at, periodEnd)], added: [piece(.paying, at, refunded)])))
                    } else {
                        var expired = event(.expiration, periodEnd, price: nil)
                        expired.reason = "voluntary"
                        made.append((event(.cancellation, at.addingTimeInterval(86_400), price: nil), nil))
                        made.append((expired, nil))
                    }
                    break
                }
                at = periodEnd
            }
            for (event, delta) in made {
                if let event {
                    pending += fold.increments(of: event)
                    events += 1
                    if sample.count < 20_000 {
                        let entry = try EventLog.entry(event, format: .deflated)
                        sample.append((entry.field, entry.value))
                    }
                }
                if let delta {
                    pending += fold.increments(of: delta)
                    deltas += 1
                    if sample.count < 20_000 {
                        let entry = try EventLog.entry(delta, customer: customer, format: .deflated)
                        sample.append((entry.field, entry.value))
                    }
                }
            }
            if (index + 1) % 1_000 == 0 { try await flush() }
        }
        if !pending.isEmpty { try await flush() }
        let folded = clock.now - began

        // The figures' bytes.
        var figureBytes = 0
        let keys = try await reports.bucketKeys("bench", generation: 1)
        for key in keys { figureBytes += try await redis.send(["MEMORY", "USAGE", key, "SAMPLES", "0"]).int ?? 0 }
        let first = calendar.day(of: start)
        let days = 366

        // Queries over the year.
        let query = ReportQuery(calendar: calendar, source: reports.source("bench", generation: 1))
        let last = calendar.adding(days: 364, to: first)
        var timings: [(String, Double, Double, Int)] = []
        for (metric, grouping) in [
            (ReportMetric.mrr, ReportGrouping.day), (.activeSubscriptions, .day), (.grossRevenue, .day), (.trialConversionRate, .day),
            (.mrr, .month), (.churned, .week), (.payingSubscriptions, .storefront), (.grossRevenue, .offer),
        ] {
            var samples: [Double] = []
            var points = 0
            for _ in 0..<30 {
                let before = clock.now
                points = try await query.run(metric, from: first, to: last, by: grouping).points.count
                samples.append(
                    Double((clock.now - before).components.attoseconds) / 1e15 + Double((clock.now - before).components.seconds) * 1000)
            }
            samples.sort()
            timings.append(("\(metric.rawValue) by \(grouping.rawValue)", samples[samples.count / 2], samples.last ?? 0, points))
        }

        // An event log's bytes per entry.
        let stream = "\(prefix):ent:{bench/00}:events"
        for chunk in stride(from: 0, to: sample.count, by: 500) {
            _ = try await redis.pipeline(sample[chunk..<min(sample.count, chunk + 500)].map { ["XADD", stream, "*", $0.0, $0.1] })
        }
        let streamBytes = try await redis.send(["MEMORY", "USAGE", stream, "SAMPLES", "0"]).int ?? 0
        // The values as stored: deflated, in base64 (fields Z and D).
        let eventJSON = sample.filter { $0.0 == "Z" }.map(\.1.utf8.count)
        let deltaJSON = sample.filter { $0.0 == "D" }.map(\.1.utf8.count)

        print("subscribers \(subscribers): \(events) events and \(deltas) deltas folded in \(folded) into \(keys.count) buckets")
        print(
            "figures: \(figureBytes) bytes, \(figureBytes / days) bytes per publisher-day (\(keys.count) keys: a day's details, a month's totals and details)"
        )
        for (name, median, slowest, points) in timings {
            print(String(format: "query %@ over a year: median %.2f ms, slowest %.2f ms (%d points)", name, median, slowest, points))
        }
        print(
            "event log: \(sample.count) entries, \(streamBytes) bytes: \(streamBytes / max(1, sample.count)) bytes per entry (deflated values: events \(eventJSON.reduce(0, +) / max(1, eventJSON.count)) bytes, deltas \(deltaJSON.reduce(0, +) / max(1, deltaJSON.count)) bytes on average); the customer's index adds about 16 bytes per event"
        )
        for key in keys { _ = try await redis.send(["UNLINK", key]) }
        try await reports.drop("bench", generation: 1)
        _ = try await redis.send(["UNLINK", stream])
        redis.close()
    }

    struct BenchError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

/// SplitMix64: the same made-up year on every run.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
