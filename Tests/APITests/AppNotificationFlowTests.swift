import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// Notifications about an app rather than a purchase (`RESCIND_CONSENT` with `appData`,
/// `EXTERNAL_PURCHASE_TOKEN` `CREATED` and `ACTIVE_TOKEN_REMINDER`), sent by the simulator,
/// posted to the API's notification route as Apple would, and run by the worker: the job
/// succeeds, says why nothing applies, and no customer changes.
@Suite struct AppNotificationFlowTests {
    /// A JSON value with sorted keys, so two reads compare equal exactly when they hold the same.
    static func canonical(_ value: Any?) throws -> String {
        guard let value else { return "absent" }
        let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed])
        return String(decoding: data, as: UTF8.self)
    }

    @Test(.timeLimit(.minutes(3))) func consentAndExternalTokenNotificationsChangeNoCustomer() async throws {
        try await APIStack.run("app-notifications", worker: true) { api in
            let customer = "kim@example.com"
            let bought = try await api.buy("premium.monthly", account: "family-child", extra: ["useIntroductoryOffer": false])
            let claimed = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            #expect(claimed["accessGranted"] as? Bool == true, "\(claimed)")
            let before = try await api.customer(customer)
            #expect(try await api.access(customer, "premium"))

            let rescinded = try await api.simulator(
                "/simulator/transactions/\(try #require(bought["transactionId"] as? String))/rescind-consent", "{}")
            let consent = try await api.forward(
                try await api.sentNotification(try #require((rescinded["notifications"] as? [String])?.first)))
            #expect(consent["notificationType"] as? String == "RESCIND_CONSENT", "\(consent)")
            #expect(consent["duplicate"] as? Bool == false && consent["customer"] == nil, "\(consent)")
            // The app transaction comes from appData, verified.
            #expect((consent["message"] as? String)?.contains("consent rescinded for the app (app transaction 70") == true, "\(consent)")

            for (subtype, extra) in [("CREATED", ""), ("ACTIVE_TOKEN_REMINDER", #","tokenType":"ACQUISITION""#)] {
                let sent = try await api.simulator(
                    "/simulator/external-purchase-tokens", #"{"bundleId":"\#(DemoCatalogs.bundleId("demo"))","subtype":"\#(subtype)"\#(extra)}"#)
                let result = try await api.forward(try await api.sentNotification(try #require(sent["notificationUUID"] as? String)))
                #expect(result["notificationType"] as? String == "EXTERNAL_PURCHASE_TOKEN" && result["subtype"] as? String == subtype)
                #expect((result["message"] as? String)?.contains("external purchase token") == true, "\(result)")
                #expect(result["customer"] == nil, "\(result)")
            }

            // Nothing the customer had changed.
            let after = try await api.customer(customer)
            #expect(try await api.access(customer, "premium"))
            for field in ["entitlements", "subscriptions", "credits"] {
                #expect(try Self.canonical(after[field]) == Self.canonical(before[field]), "\(field): \(before) -> \(after)")
            }
        }
    }
}
