import Foundation
import RedisTestSupport
import Testing

/// A subscription migrated to a new original transaction id (`MIGRATION`,
/// `previousOriginalTransactionId`) keeps its owner and its history, whatever the transfer
/// policy: through the simulator, the API's notification route and the worker.
@Suite struct MigrationFlowTests {
    @Test(.timeLimit(.minutes(4)), arguments: [("demo", APIStack.demoToken), ("keep", APIStack.keepToken), ("share", APIStack.shareToken)])
    func aMigratedSubscriptionKeepsItsOwnerWithNoGap(publisher: String, token: String) async throws {
        try await APIStack.run("migration-\(publisher)", worker: true) { api in
            let ann = "ann-\(publisher)@example.com"
            let bought = try await api.buy("premium.monthly", publisher: publisher, extra: ["environment": "Production"])
            let old = try #require(bought["originalTransactionId"] as? String)
            let claimed = try await api.claim(
                ["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)], token: token)
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
            try await api.advance(seconds: 3600)
            let before = try await api.simulatorNow()

            let migrated = try await api.simulator("/simulator/subscriptions/\(old)/migrate", "{}")
            let new = try #require(migrated["originalTransactionId"] as? String)
            #expect(new != old)
            let uuid = try #require((migrated["notifications"] as? [String])?.first)
            let sent = try await api.sentNotification(uuid)
            let posted = try await api.call(
                .POST, "/v1/notifications/apple/\(publisher)", token: nil, body: String(decoding: sent.body, as: UTF8.self),
                route: "POST /v1/notifications/apple/{publisherId}")
            try #require(posted.status == 200, "\(posted.text)")
            let notification = try await api.result(try #require(posted.json["jobId"] as? String), token: token)
            #expect(notification["notificationType"] as? String == "MIGRATION")
            #expect(notification["customer"] as? String == ann, "the previous chain's owner holds the new one: \(notification)")
            #expect(notification["accessGranted"] as? Bool == true, "\(notification)")
            let after = try await api.simulatorNow()

            // Entitled on every date around the migration, and the subscription says where it came from.
            for date in [before.addingTimeInterval(-60), before, after, after.addingTimeInterval(60)] {
                let document = try await api.customer(ann, at: date, token: token)
                #expect((document["entitlements"] as? [String] ?? []).contains("premium"), "\(publisher) at \(date): \(document)")
            }
            try await api.advance(seconds: 60)
            let now = try await api.customer(ann, token: token)
            let subscriptions = now["subscriptions"] as? [[String: Any]] ?? []
            let current = subscriptions.first { $0["originalTransactionId"] as? String == new }
            #expect(current?["previousOriginalTransactionId"] as? String == old, "\(subscriptions)")
            #expect(current?["status"] as? String == "active")
            #expect(try await api.access(ann, "premium", token: token))

            // Another customer presenting the migrated purchase meets the publisher's policy,
            // as for any purchase ann holds: ann held it first.
            let bob = "bob-\(publisher)@example.com"
            let theirs = try await api.claim(["customer": bob, "transactionId": new], token: token)
            switch publisher {
            case "keep": #expect(theirs["reason"] as? String == "ownedByAnotherCustomer", "\(theirs)")
            case "share":
                #expect(try await api.access(ann, "premium", token: token))
                #expect(try await api.access(bob, "premium", token: token))
            default: #expect((theirs["transfer"] as? [String: Any])?["from"] as? String == ann, "\(theirs)")
            }
        }
    }
}
