import AppStore
import AppStoreSimulator
import Foundation
import Testing

/// Notification delivery: Apple's retry schedule (compressed), history, duplicates,
/// out-of-order delivery, and V1 bodies for the legacy road.
@Suite struct SimulatorNotificationTests {
    @Test func failedDeliveriesAreRetriedAndRecordedInHistory() async throws {
        // The receiver fails the first two attempts.
        try await SimulatorHarness.run(receiverStatus: { $0 <= 2 ? .internalServerError : .ok }) { sim in
            let purchase = try await sim.purchase("com.entitle.demo.pass.30days")
            let entries = await sim.inbox.wait(for: "/v2", count: 3)
            #expect(entries.count == 3)
            #expect(Set(entries.map(\.body)).count == 1)

            let api = try await sim.apiClient()
            var request = NotificationHistoryRequest(
                startDate: AppleTimestamp(Date().addingTimeInterval(-3600)), endDate: AppleTimestamp(Date().addingTimeInterval(3600)))
            request.transactionId = purchase.transactionId
            let history = try await api.getNotificationHistory(request)
            let item = try #require(history.notificationHistory?.first)
            #expect(
                item.sendAttempts?.map(\.sendAttemptResult?.rawValue) == [
                    "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "UNSUCCESSFUL_HTTP_RESPONSE_CODE", "SUCCESS",
                ])
            #expect(try await sim.verifier.verifyNotification(try #require(item.signedPayload)).notificationType == .oneTimeCharge)

            var failures = request
            failures.transactionId = nil
            failures.onlyFailures = true
            #expect(try await api.getNotificationHistory(failures).notificationHistory?.isEmpty == true)
            var backwards = request
            backwards.endDate = AppleTimestamp(Date().addingTimeInterval(-7200))
            let refused = await #expect(throws: AppStoreError.self) { try await api.getNotificationHistory(backwards) }
            #expect(refused?.apiErrorCode == 4_000_013)
        }
    }

    @Test func duplicatesAndOutOfOrderDeliveryOnRequest() async throws {
        try await SimulatorHarness.run { sim in
            #expect(try await sim.post("/simulator/notifications/hold").status == 204)
            let purchase = try await sim.purchase("com.entitle.demo.basic.monthly", #""useIntroductoryOffer":false"#)
            let off = try await sim.subscriptionEvent(purchase.originalTransactionId, "auto-renew-off")
            #expect(await sim.inbox.count("/v2") == 0)
            let released = try await sim.post("/simulator/notifications/release", #"{"order":"reversed"}"#)
            #expect(try released.decode([String].self) == [off.notifications[0], purchase.notifications[0]])
            let delivered = try await sim.notifications(count: 2)
            #expect(delivered.map(\.notificationType) == [.didChangeRenewalStatus, .subscribed])
            #expect(try #require(delivered[0].signedDate) > (try #require(delivered[1].signedDate)))

            #expect(try await sim.post("/simulator/notifications/\(purchase.notifications[0])/resend").status == 202)
            let again = try await sim.notifications(count: 3)
            #expect(again[2].notificationUUID == purchase.notifications[0])
            #expect(try await sim.post("/simulator/notifications/nope/resend").status == 404)
        }
    }

    @Test func legacyV1NotificationsCarryTheUnifiedReceipt() async throws {
        try await SimulatorHarness.run { sim in
            let purchase = try await sim.purchase("com.entitle.demo.basic.monthly", #""useIntroductoryOffer":false"#)
            _ = try await sim.subscriptionEvent(purchase.originalTransactionId, "auto-renew-off")
            let entries = await sim.inbox.wait(for: "/v1", count: 2)
            let bodies = try entries.map { try #require((try JSONSerialization.jsonObject(with: Data($0.body))) as? [String: Any]) }
            #expect(bodies.map { $0["notification_type"] as? String } == ["INITIAL_BUY", "DID_CHANGE_RENEWAL_STATUS"])
            let last = try #require(bodies.last)
            #expect(last["password"] as? String == SimulatorHarness.sharedSecret)
            #expect(last["auto_renew_status"] as? String == "false")
            #expect(last["environment"] as? String == "Sandbox")
            let unified = try #require(last["unified_receipt"] as? [String: Any])
            let info = try #require(unified["latest_receipt_info"] as? [[String: Any]])
            #expect(info.first?["original_transaction_id"] as? String == purchase.originalTransactionId)
            let receipt = try await AppReceiptVerifier(configuration: .init(roots: [sim.server.store.receiptSigning.root]))
                .verify(base64: try #require(unified["latest_receipt"] as? String))
            #expect(receipt.inAppPurchases.first?.transactionId == purchase.transactionId)
        }
    }

    @Test func testNotificationsThroughTheServerAPI() async throws {
        try await SimulatorHarness.run { sim in
            let api = try await sim.apiClient()
            let token = try #require(try await api.requestTestNotification().testNotificationToken)
            let received = try await sim.received(token)
            #expect(received.notificationType == .test)
            #expect(received.data?.bundleId == SimulatorHarness.bundleId)
        }
    }
}
