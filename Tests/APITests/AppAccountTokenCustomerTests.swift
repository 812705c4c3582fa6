import Foundation
import Testing

/// A publisher that names its customers by appAccountToken. A UUID means the same in either
/// case, and the two sides write it differently: Apple's signed data and notifications in
/// lower case, an app's Swift `UUID().uuidString` in upper case. Both are one customer.
@Suite struct AppAccountTokenCustomerTests {
    @Test(.timeLimit(.minutes(3))) func aTokenInUpperCaseIsTheCustomerAppleNamesInLowerCase() async throws {
        try await APIStack.run(
            "token-case", worker: true, catalog: { publishers in publishers[0]["customerIdentity"] = "appAccountToken" }
        ) { api in
            let upper = UUID().uuidString
            let lower = upper.lowercased()
            try #require(upper != lower)
            let bought = try await api.buy("premium.monthly", appAccountToken: upper, extra: ["environment": "Production"])
            let signed = try #require(bought["signedTransaction"] as? String)

            // Apple's notification comes first and claims the purchase for the token as Apple
            // writes it.
            let uuid = try #require((bought["notificationUUID"] as? String) ?? (bought["notifications"] as? [String])?.first)
            let notified = try await api.forward(try await api.sentNotification(uuid))
            #expect(notified["customer"] as? String == lower, "\(notified)")

            // The app posts the purchase as its customer, in upper case: the same customer, so
            // nothing moves.
            let claimed = try await api.claim(["customer": upper, "signedTransaction": signed])
            #expect(claimed["customer"] as? String == lower, "\(claimed)")
            let claim = try #require(claimed["claim"] as? [String: Any], "\(claimed)")
            #expect(claim["outcome"] as? String == "granted", "\(claimed)")
            #expect(claim["heldByAnotherCustomer"] as? Bool == false, "\(claimed)")
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")

            // Read in either case, it is one customer, with one history and no transfer in it.
            for id in [upper, lower] {
                #expect(try await api.access(id, "premium"), "\(id)")
                #expect(try await api.customer(id)["entitlements"] as? [String] == ["hd", "premium"], "\(id)")
            }
            let events = try await api.events(upper)
            #expect(!events.isEmpty)
            #expect(events.map { $0["id"] as? String } == (try await api.events(lower)).map { $0["id"] as? String })
            #expect(!events.contains { ($0["type"] as? String ?? "").contains("transfer") }, "\(events)")
        }
    }
}
