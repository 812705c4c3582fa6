import AppStore
import Crypto
import EntitleCore
import Foundation
import RedisTestSupport
import Testing

/// The App Store Server API hosts: Apple's recommended ones by default (2026-05-05), the
/// earlier ones when an operator sets them.
@Suite struct AppStoreHostTests {
    static func settings(_ extra: [String: String]) async throws -> EntitleConfiguration {
        let document: [String: Any] = [
            "publishers": [
                [
                    "id": "acme",
                    "apps": [
                        [
                            "bundleId": "com.acme.app", "appAppleId": 1_234_567_890, "environments": ["Sandbox", "Production"],
                            "apiKey": ["keyId": "KEY123", "issuerId": "issuer", "privateKeyVariable": "ACME_P8"],
                        ]
                    ],
                    "offers": [["offerId": "gold", "productIds": ["com.acme.gold"], "entitlements": ["gold"]]],
                ]
            ]
        ]
        let catalog = FileManager.default.temporaryDirectory.appending(path: "hosts-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: catalog))
        defer { try? FileManager.default.removeItem(atPath: catalog) }
        var environment = ["ACME_P8": P256.Signing.PrivateKey().pemRepresentation]
        environment.merge(extra) { $1 }
        return try await EntitleConfiguration.load(catalogPath: catalog, environment: environment, logger: TestRedis.logger)
    }

    @Test func applesRecommendedHostsAreTheDefaultAndTheEarlierOnesCanBeSet() async throws {
        let defaults = try #require(try await Self.settings([:]).gateway(publisher: "acme", bundleId: "com.acme.app"))
        #expect(defaults.production?.configuration.productionURL == "https://api.storekit.apple.com")
        #expect(defaults.sandbox?.configuration.sandboxURL == "https://api.storekit-sandbox.apple.com")
        #expect(
            AppStoreServerAPIClient.Configuration(keyId: "k", issuerId: "i", bundleId: "b").productionURL
                == "https://api.storekit.apple.com")

        let earlier = try #require(
            try await Self.settings([
                "ENTITLE_APPSTORE_API_URL": "https://api.storekit.itunes.apple.com",
                "ENTITLE_APPSTORE_SANDBOX_API_URL": "https://api.storekit-sandbox.itunes.apple.com/",
            ]).gateway(publisher: "acme", bundleId: "com.acme.app"))
        #expect(earlier.production?.configuration.productionURL == "https://api.storekit.itunes.apple.com")
        #expect(earlier.sandbox?.configuration.sandboxURL == "https://api.storekit-sandbox.itunes.apple.com")

        for wrong in ["http://api.storekit.itunes.apple.com", "https://api.storekit.apple.com/inApps", "not a url"] {
            await #expect(throws: WorkerError.self, "\(wrong)") { _ = try await Self.settings(["ENTITLE_APPSTORE_API_URL": wrong]) }
        }
    }
}
