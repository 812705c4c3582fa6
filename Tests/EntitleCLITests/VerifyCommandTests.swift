import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle verify` on real Apple data: what it prints and how it exits.
@Suite struct VerifyCommandTests {
    static let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Vectors").path

    func verify(_ arguments: [String]) async throws -> (status: Int32, json: [String: Any], errors: String) {
        let result = try await ChildProcess.run(ChildProcess.entitleExecutable, ["verify"] + arguments)
        let object = (try? JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any]) ?? [:]
        return (result.status, object, result.errors)
    }

    @Test func aRealSignedTransactionIsValid() async throws {
        let result = try await verify([
            "--json", "\(Self.vectors)/signed-data/gopay-real-transaction-sandbox-2022-10-voicerecording-with-appAccountToken.jws",
        ])
        #expect(result.status == 0)
        #expect(result.json["kind"] as? String == "transaction")
        #expect(result.json["valid"] as? Bool == true)
        #expect(result.json["environment"] as? String == "Sandbox")
        #expect(result.json["bundleId"] as? String == "Com.VoiceRecording.Telephone")
        #expect(result.json["transactionId"] as? String == "2000000184445477")
        #expect(result.json["productId"] as? String == "Com.VoiceRecording.Telephone.103")
        #expect(result.json["reason"] == nil)
    }

    @Test func notificationsRenewalInfosAndReceiptsAreRecognised() async throws {
        let notification = try await verify(["--json", "\(Self.vectors)/notifications/v2/gopay-real-DID_RENEW-sandbox-2022-03.jws"])
        #expect(notification.status == 0)
        #expect(notification.json["kind"] as? String == "notification")
        #expect(notification.json["notificationType"] as? String == "DID_RENEW")
        #expect(notification.json["transactionId"] as? String == "2000000004047119")

        let renewal = try await verify([
            "--json", "\(Self.vectors)/signed-data/gopay-real-renewalinfo-sandbox-2022-11-voicerecording-expired.jws",
        ])
        #expect(renewal.status == 0)
        #expect(renewal.json["kind"] as? String == "renewalInfo")
        #expect(renewal.json["originalTransactionId"] as? String == "2000000184445477")

        let receipt = try await verify(["--json", "\(Self.vectors)/receipts/tpinappreceipt/receipt-production"])
        #expect(receipt.status == 0)
        #expect(receipt.json["kind"] as? String == "receipt")
        #expect(receipt.json["environment"] as? String == "Production")
        #expect(receipt.json["bundleId"] as? String == "org.getpure.pure-iphone")
    }

    @Test func invalidDataExitsOneWithAReason() async throws {
        let expired = try await verify(
            [
                "--json", "--at", "2026-01-01T00:00:00Z",
                "\(Self.vectors)/notifications/v2/real-apple-signed-TEST-notification-sandbox-2022-09.jws",
            ])
        #expect(expired.status == 1)
        #expect(expired.json["valid"] as? Bool == false)
        #expect((expired.json["reason"] as? String)?.contains("not valid at") == true)

        let wrongBundle = try await verify(
            ["--json", "--bundle-id", "com.example", "\(Self.vectors)/signed-data/gopay-real-transaction-sandbox-2022-03-audarecorder.jws"])
        #expect(wrongBundle.status == 1)
        #expect((wrongBundle.json["reason"] as? String)?.contains("com.audaos.audarecorder") == true)

        let otherRoot = try await verify(
            [
                "--json", "--root", "\(Self.vectors)/appstore-library/swift/certs/testCA.der",
                "\(Self.vectors)/signed-data/gopay-real-transaction-sandbox-2022-03-audarecorder.jws",
            ])
        #expect(otherRoot.status == 1)
        #expect((otherRoot.json["reason"] as? String)?.contains("not trusted") == true)

        let ios6 = try await verify([
            "--json", "\(Self.vectors)/receipts/legacy-transaction-receipts/aporat-ios6-transaction-receipt-sandbox-2012.b64",
        ])
        #expect(ios6.status == 1)
        #expect(ios6.json["kind"] as? String == "transactionReceipt")
        #expect(ios6.json["transactionId"] as? String == "1000000046178817")
    }

    /// Xcode's real signed app transaction (StoreKit testing; first version 1), alone and as
    /// Get App Transaction Info's response, explained for an app that was paid until version 2.
    @Test func anAppTransactionIsExplainedForAnAppThatWasPaid() async throws {
        let jws = "\(Self.vectors)/appstore-library/swift/xcode/xcode-signed-app-transaction"
        let paid = try await verify(["--json", "--allow-test-environments", "--paid-before-version", "2", jws])
        #expect(paid.status == 0, "\(paid.errors)")
        #expect(paid.json["kind"] as? String == "appTransaction" && paid.json["valid"] as? Bool == true)
        #expect(paid.json["bundleId"] as? String == "com.example.naturelab.backyardbirds.example")
        let app = try #require(paid.json["appTransaction"] as? [String: Any], "\(paid.json)")
        #expect(app["originalApplicationVersion"] as? String == "1" && app["applicationVersion"] as? String == "1")
        #expect(app["originalPurchaseDate"] as? String == "0001-01-01T00:00:00Z")
        #expect(app["boughtWhilePaid"] as? Bool == true)

        // Get App Transaction Info's response body; the version compares as numbers (1 is before 1.0.1, not 10).
        let response = FileManager.default.temporaryDirectory.appendingPathComponent("app-transaction-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: response) }
        let signed = try String(contentsOfFile: jws, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        try Data(#"{"signedAppTransactionInfo":"\#(signed)"}"#.utf8).write(to: response)
        let free = try await verify(["--json", "--allow-test-environments", "--paid-before-version", "1.0", response.path])
        #expect(free.status == 0)
        #expect(free.json["kind"] as? String == "appTransaction")
        #expect((free.json["appTransaction"] as? [String: Any])?["boughtWhilePaid"] as? Bool == false, "\(free.json)")

        let text = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["verify", "--allow-test-environments", "--paid-before-version", "10", response.path])
        #expect(text.status == 0)
        #expect(text.output.contains("appTransaction: valid"), "\(text.output)")
        #expect(text.output.contains("first version: 1 (originalApplicationVersion"), "\(text.output)")
        #expect(text.output.contains("bought while the app was paid: yes (first version is before 10)"), "\(text.output)")

        // Without test environments Xcode's data is refused; a bad version is a usage error.
        #expect(try await verify(["--json", jws]).status == 1)
        #expect(try await verify(["--paid-before-version", "two", jws]).status == 2)
        #expect(try await verify(["--paid-before-version", "1..2", jws]).status == 2)
    }

    @Test func usageErrorsExitTwo() async throws {
        #expect(try await verify(["/nonexistent/file"]).status == 2)
        #expect(try await verify(["--at", "yesterday", "\(Self.vectors)/certs/AppleRootCA-G3.cer"]).status == 2)
        #expect(try await verify(["--root", "/nonexistent.cer", "\(Self.vectors)/certs/AppleRootCA-G3.cer"]).status == 2)
        let unknown = try await verify(["--bogus", "file"])
        #expect(unknown.status == 2)
        #expect(unknown.errors.contains("--bogus"))
    }
}
