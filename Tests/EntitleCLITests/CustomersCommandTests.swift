import EntitleCore
import Entitlements
import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle customers show`, reading what the entitlement store holds.
@Suite struct CustomersCommandTests {
    @Test func showsEntitlementsSubscriptionsAndCreditsNowAndFromHistory() async throws {
        let cli = try await CLI("customers")
        let store = EntitlementStore(redis: try await TestRedis.pool(), prefix: cli.prefix, logger: TestRedis.logger)
        let catalog = try EntitlementCatalog(
            json: Data(
                #"{"publishers":[{"id":"mag","apps":[{"bundleId":"com.mag","environments":["Sandbox"]}],"offers":[{"offerId":"nov","productIds":["issue.11"],"entitlements":["issue:11"]},{"offerId":"calls","productIds":["credits"],"credits":50}]}]}"#
                    .utf8))
        let engine = EntitlementEngine(publisher: try #require(catalog.publisher("mag")))
        let bought = Date(timeIntervalSince1970: 1_790_000_000)
        _ = try await store.update(publisher: "mag", customer: "reader@example.com") { state in
            _ = engine.apply(
                PurchaseFact(
                    transactionId: "1", originalTransactionId: "1", productId: "issue.11", bundleId: "com.mag", kind: .nonConsumable,
                    environment: "Sandbox", purchaseDate: bought), to: &state, now: bought)
            return engine.apply(
                PurchaseFact(
                    transactionId: "2", originalTransactionId: "2", productId: "credits", bundleId: "com.mag", kind: .consumable,
                    environment: "Sandbox", purchaseDate: bought, quantity: 2), to: &state, now: bought)
        }

        let now = try await cli.json(["customers", "show", "reader@example.com", "--publisher", "mag", "--json"])
        #expect(now["publisher"] as? String == "mag")
        #expect(now["customer"] as? String == "reader@example.com")
        #expect(now["entitlements"] as? [String] == ["issue:11"])
        let credits = try #require(now["credits"] as? [String: Any])
        #expect(credits["balance"] as? Int == 100)
        #expect((credits["ledger"] as? [[String: Any]])?.first?["transactionId"] as? String == "2")
        #expect((now["subscriptions"] as? [Any])?.isEmpty == true)

        let before = try await cli.json([
            "customers", "show", "reader@example.com", "--publisher", "mag", "--json", "--at", "2026-01-01T00:00:00Z",
        ])
        #expect(before["entitlements"] as? [String] == [])

        let text = try await cli.run(["customers", "show", "reader@example.com", "--publisher", "mag"])
        #expect(text.status == 0)
        #expect(text.output.contains("entitlements:  issue:11"))
        let missing = try await cli.run(["customers", "show", "nobody", "--publisher", "mag"])
        #expect(missing.status == 1)
        #expect(missing.errors.contains("no customer nobody of publisher mag"))
        let badDate = try await cli.run(["customers", "show", "x", "--publisher", "mag", "--at", "yesterday"])
        #expect(badDate.status != 0)
        #expect(badDate.errors.contains("--at must be an ISO 8601 time"))
    }
}

/// `entitle worker` refuses a wrong catalog or a missing secret at start, naming it.
@Suite struct WorkerConfigurationTests {
    @Test func aBadCatalogOrAMissingSecretStopsTheWorkerWithAMessage() async throws {
        let cli = try await CLI("worker-config")
        let catalog = FileManager.default.temporaryDirectory.appending(path: "bad-entitle-catalog-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: catalog) }
        try
            #"{"publishers":[{"id":"p","apps":[{"bundleId":"com.p","environments":["Sandbox"]}],"offers":[{"offerId":"a","productIds":["x"],"credits":5},{"offerId":"b","productIds":["x"],"credits":5}]}]}"#
            .write(to: catalog, atomically: true, encoding: .utf8)
        let bad = try await cli.run(["worker", "--catalog", catalog.path])
        #expect(bad.status != 0)
        #expect(bad.errors.contains(#"publisher "p" offer "b": product x is already mapped to offer "a""#), "\(bad.errors)")

        // Production (no ENTITLE_ENV): every secret the catalog names must be set.
        let development = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appending(path: "Config/catalog.development.json")
        let missing = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["worker", "--catalog", development.path] + cli.common,
            environment: ["ENTITLE_ENV": "production", "ENTITLE_DEMO_SHARED_SECRET": ""])
        #expect(missing.status != 0)
        #expect(missing.errors.contains("ENTITLE_DEMO_SHARED_SECRET is not set"), "\(missing.errors)")
        let unknown = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["worker", "--catalog", development.path] + cli.common, environment: ["ENTITLE_ENV": "staging"])
        #expect(unknown.status != 0 && unknown.errors.contains("ENTITLE_ENV must be development or production"))
    }
}
