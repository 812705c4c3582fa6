import EntitleCore
import Entitlements
import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle report`: the figures the event log folds into, as JSON, CSV and a table; bad
/// requests refused with a message and a non-zero exit; `rebuild` equal to the figures kept.
@Suite struct ReportCommandTests {
    static let catalog = #"""
        {"publishers":[{"id":"mag","timeZone":"Europe/Paris","apps":[{"bundleId":"com.mag","appAppleId":1234567890,"environments":["Production"]}],
          "offers":[{"offerId":"monthly","productIds":["sub.monthly"],"entitlements":["read"]}]}]}
        """#

    @Test func reportsFiguresRefusesBadRequestsAndRebuildsEqual() async throws {
        let cli = try await CLI("report")
        let file = FileManager.default.temporaryDirectory.appending(path: "report-catalog-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try Self.catalog.write(to: file, atomically: true, encoding: .utf8)
        let catalog = try EntitlementCatalog(json: Data(Self.catalog.utf8))
        let publisher = try #require(catalog.publisher("mag"))
        let store = EntitlementStore(redis: try await TestRedis.pool(), prefix: cli.prefix, logger: TestRedis.logger)
        let engine = EntitlementEngine(publisher: publisher)
        // Three readers subscribe on 2026-03-01, 02 and 03 (10:00 UTC, 11:00 in Paris), at 4.99 EUR a month.
        for index in 0..<3 {
            let bought = Date(timeIntervalSince1970: 1_772_359_200 + Double(index) * 86_400)  // 2026-03-01T10:00:00Z
            let events = ChangeEvents(
                publisher: publisher, renewalCheckMargin: .seconds(60), billingRetryCheckInterval: .seconds(3600),
                now: bought)
            _ = try await store.update(
                publisher: "mag", customer: "reader\(index)@example.com", fence: nil,
                { state in
                    _ = engine.apply(
                        PurchaseFact(
                            transactionId: "\(100 + index)", originalTransactionId: "\(100 + index)", productId: "sub.monthly",
                            bundleId: "com.mag", kind: .autoRenewable, environment: "Production", purchaseDate: bought,
                            expiresDate: bought.addingTimeInterval(31 * 86_400), price: "4.99", currency: "EUR", storefront: "FRA"),
                        to: &state, now: bought)
                },
                effects: { before, after, version in try events.changes(before: before, after: after, version: version) })
        }
        let common = ["--publisher", "mag", "--catalog", file.path, "--from", "2026-03-01", "--to", "2026-03-05"]
        // The figures are folded by workers, none of which runs here: a rebuild brings the figures
        // in use up to the log's end, folds the log again beside them, and compares.
        let first = try await cli.run(["report", "rebuild"] + common.prefix(4) + ["--use"])
        #expect(first.status == 0 && first.output.contains("now in use"), "\(first.output) \(first.errors)")
        let again = try await cli.run(["report", "rebuild"] + common.prefix(4))
        #expect(again.status == 0 && again.output.contains("equal"), "\(again.output) \(again.errors)")

        let report = try await cli.json(["report"] + common + ["--metric", "payingSubscriptions", "--metric", "mrr", "--json"])
        #expect(report["publisher"] as? String == "mag" && report["by"] as? String == "day")
        let metrics = try #require(report["metrics"] as? [String: Any])
        let paying = try #require(metrics["payingSubscriptions"] as? [[String: Any]]).map { $0["value"] as? Double ?? -1 }
        #expect(paying == [1, 2, 3, 3, 3], "\(paying)")
        let mrr = try #require(metrics["mrr"] as? [[String: Any]])
        #expect(mrr.last?["currency"] as? String == "EUR" && mrr.last?["value"] as? Double == 14_970)
        #expect((report["units"] as? [String: String])?["mrr"] == "milliunits")
        #expect(report["environment"] as? String == "production")
        // The readers bought in production: the sandbox's report has none of them.
        let sandbox = try await cli.json(
            ["report"] + common + ["--metric", "payingSubscriptions", "--environment", "sandbox", "--json"])
        #expect(sandbox["environment"] as? String == "sandbox")
        let testers = try #require((sandbox["metrics"] as? [String: Any])?["payingSubscriptions"] as? [[String: Any]])
        #expect(testers.count == 5 && testers.allSatisfy { $0["value"] as? Double == 0 }, "\(testers)")

        let csv = try await cli.run(["report"] + common + ["--metric", "newPaidSubscriptions", "--by", "month", "--csv"])
        #expect(
            csv.status == 0 && csv.output.contains("metric,key,currency,value,environment\n")
                && csv.output.contains("newPaidSubscriptions,2026-03,,3,production\n"), "\(csv.output)")
        // A sandbox file says so on every row.
        let sandboxCSV = try await cli.run(
            ["report"] + common + ["--metric", "newPaidSubscriptions", "--by", "month", "--environment", "sandbox", "--csv"])
        let rows = sandboxCSV.output.split(separator: "\n").dropFirst()
        #expect(sandboxCSV.status == 0 && !rows.isEmpty && rows.allSatisfy { $0.hasSuffix(",sandbox") }, "\(sandboxCSV.output)")
        let table = try await cli.run(["report"] + common + ["--by", "offer"])
        #expect(table.status == 0 && table.output.contains("activeSubscriptions (count)") && table.output.contains("monthly  3"))

        for (arguments, message) in [
            (["--metric", "nope"], "unknown metric nope"),
            (["--metric", "mrr", "--by", "hour"], "by must be one of"),
            (["--metric", "mrr", "--to", "2026-02-30"], "to must be a date"),
            (["--metric", "mrr", "--environment", "Sandbox"], "environment must be production or sandbox"),
        ] {
            let refused = try await cli.run(["report"] + common + arguments)
            #expect(refused.status == 64 && refused.errors.contains(message), "\(arguments): \(refused.status) \(refused.errors)")
        }
        let reversed = try await cli.run([
            "report", "--publisher", "mag", "--catalog", file.path, "--from", "2026-03-05", "--to", "2026-03-01",
        ])
        #expect(reversed.status == 64 && reversed.errors.contains("is after to"))
        let long = try await cli.run(["report", "--publisher", "mag", "--catalog", file.path, "--from", "2010-01-01", "--to", "2026-03-01"])
        #expect(long.status == 64 && long.errors.contains("ten years"))
        let unknown = try await cli.run(["report", "--publisher", "acme", "--catalog", file.path])
        #expect(unknown.status == 1 && unknown.errors.contains("no publisher acme"))
        let both = try await cli.run(["report"] + common + ["--json", "--csv"])
        #expect(both.status == 64 && both.errors.contains("choose one"))
    }
}

/// `entitle migrate customers`: customers written before the event log move to their
/// partition's keys, readable there; one written at both places is named, not overwritten.
/// `entitle migrate holders` indexes customers written before the holder indexes.
@Suite struct MigrateCommandTests {
    @Test func customersMoveToTheirPartitionsKeys() async throws {
        try await Self.migrate(try await CLI("migrate"))
    }

    /// On a Redis Cluster, where the old and new keys are in different slots (and the
    /// customers on different primaries): every primary is read, and a copy a stopped run
    /// left is finished.
    @Test func customersMoveAndHoldersAreIndexedOnACluster() async throws {
        let cluster = try await LocalRedisCluster.start(replicas: 0)
        do {
            let cli = try await CLI("migrate-cluster", url: cluster.url)
            let node = try await ChildProcess.run(
                ChildProcess.entitleExecutable,
                ["migrate", "customers", "--redis", "redis://" + cluster.nodes[0].address, "--prefix", cli.prefix])
            #expect(node.status != 0 && node.errors.contains("redis+cluster://"), "one node alone is refused: \(node.errors)")
            let keys = EntitlementKeys(prefix: cli.prefix)
            // Customers on every primary, old keys in other slots than their new ones.
            var customers: [String] = []
            var perPrimary: [String: Int] = [:]
            for index in 0..<1000 where customers.count < 12 {
                let customer = "c\(index)@example.com"
                let primary = try await cluster.primary(forKey: keys.legacyCustomer("mag", customer)).address
                guard perPrimary[primary, default: 0] < 4 else { continue }
                perPrimary[primary, default: 0] += 1
                customers.append(customer)
            }
            #expect(perPrimary.count == 3 && customers.count == 12, "the old keys are spread over the primaries")
            for customer in customers {
                let slots = try await [keys.legacyCustomer("mag", customer), keys.customer("mag", customer)].asyncMap {
                    try await cli.redis.send(["CLUSTER", "KEYSLOT", $0]).int
                }
                #expect(slots[0] != slots[1])
                _ = try await cli.redis.send(["HSET", keys.legacyCustomer("mag", customer), "doc", Self.document(customer), "v", "3"])
            }
            // A run stopped after its copy and before its delete.
            _ = try await cli.redis.send(["HSET", keys.customer("mag", "c0@example.com"), "doc", Self.document("c0@example.com"), "v", "3"])
            try await Self.migrate(cli, alsoMoved: customers.count)

            // Holders: customers written by a worker, their indexes lost, then indexed again.
            let store = EntitlementStore(redis: cli.redis, prefix: cli.prefix, logger: TestRedis.logger)
            let start = Date().addingTimeInterval(-3600)
            for (index, customer) in customers.enumerated() {
                try await store.update(publisher: "demo", customer: customer) { state in
                    state.periods.append(
                        AccessPeriod(
                            transactionId: "t\(index)", originalTransactionId: "o\(index)", offerId: "premium", productId: "premium",
                            entitlements: ["premium"], start: start, end: start.addingTimeInterval(30 * 86_400)))
                }
            }
            let indexed = Set(try await store.holders(publisher: "demo", entitlement: "premium", after: 0))
            #expect(indexed == Set(customers))
            for node in try await cluster.roles().primaries {
                for key in try await node.send(["KEYS", cli.prefix + ":ent:*holders:*"]).array?.compactMap(\.string) ?? [] {
                    _ = try await node.send(["DEL", key])
                }
            }
            #expect(try await store.holders(publisher: "demo", entitlement: "premium", after: 0).isEmpty)
            // Read: mag's customers (moved above) and demo's; indexed: demo's, by entitlement and by offer.
            let holders = try await cli.run(["migrate", "holders"])
            #expect(
                holders.status == 0
                    && holders.output.contains("\(2 * customers.count + 2) customers read, \(2 * customers.count) index entries added"),
                "\(holders.output) \(holders.errors)")
            #expect(Set(try await store.holders(publisher: "demo", entitlement: "premium", after: 0)) == indexed)

            // A primary that failed (no replica to take over) still holds its customers: the
            // command refuses to run rather than skip them.
            let primaries = try await cluster.roles().primaries
            let lost = primaries[0]
            await lost.kill()
            try await eventually("every other primary to mark the lost one failed") {
                for survivor in primaries.dropFirst() {
                    let nodes = try await survivor.send(["CLUSTER", "NODES"]).string ?? ""
                    guard nodes.split(separator: "\n").contains(where: { $0.contains(lost.address) && $0.contains("master,fail ") })
                    else { return false }
                }
                return true
            }
            let partial = try await cli.run(["migrate", "customers"])
            #expect(partial.status != 0 && partial.errors.contains("of its 16384 slots"), "\(partial.output) \(partial.errors)")
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// A cluster of one node, which names itself with no address in `CLUSTER NODES`.
    @Test func customersMoveOnAClusterOfOneNode() async throws {
        let cluster = try await LocalRedisCluster.startOneNode()
        do {
            try await Self.migrate(try await CLI("migrate-one-node", url: "redis+cluster://" + cluster.nodes[0].address))
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    static func document(_ customer: String) -> String {
        #"{"publisher":"mag","customer":"\#(customer)","transactions":{},"periods":[],"subscriptions":{},"credits":{"entries":[]}}"#
    }

    /// Two customers to move, one of them written at both places; `alsoMoved` more already
    /// written at their old keys.
    static func migrate(_ cli: CLI, alsoMoved: Int = 0) async throws {
        let keys = EntitlementKeys(prefix: cli.prefix)
        for customer in ["old@example.com", "both@example.com"] {
            _ = try await cli.redis.send(["HSET", keys.legacyCustomer("mag", customer), "doc", document(customer), "v", "3"])
        }
        _ = try await cli.redis.send(["HSET", keys.customer("mag", "both@example.com"), "doc", document("both@example.com"), "v", "7"])
        let dry = try await cli.run(["migrate", "customers", "--dry-run"])
        #expect(dry.status == 0 && dry.output.contains("\(2 + alsoMoved) customers would move"), "\(dry.output) \(dry.errors)")
        let run = try await cli.run(["migrate", "customers"])
        #expect(
            run.status == 1 && run.output.contains("\(1 + alsoMoved) customers moved") && run.errors.contains("both@example.com"),
            "\(run.output) \(run.errors)")
        #expect(try await cli.redis.send(["HGET", keys.customer("mag", "old@example.com"), "v"]).string == "3")
        #expect(try await cli.redis.send(["HGET", keys.customer("mag", "old@example.com"), "doc"]).string == document("old@example.com"))
        #expect(try await cli.redis.send(["EXISTS", keys.legacyCustomer("mag", "old@example.com")]).int == 0)
        #expect(try await cli.redis.send(["HGET", keys.customer("mag", "both@example.com"), "v"]).string == "7", "the new one kept")
        #expect(try await cli.redis.send(["HGET", keys.legacyCustomer("mag", "both@example.com"), "v"]).string == "3", "the old one left")
        let again = try await cli.run(["migrate", "customers"])
        #expect(again.status == 1 && again.output.contains("0 customers moved"))
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
