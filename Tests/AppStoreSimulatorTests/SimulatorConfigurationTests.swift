import AppStore
import Foundation
import Testing
import X509

@testable import AppStoreSimulator

/// Catalog checking, kept signing keys, and the receipt container round trip.
@Suite struct SimulatorConfigurationTests {
    func catalog(_ products: String, groups: String = #"[{"id":"g1"}]"#) -> URL {
        let url = FileManager.default.temporaryDirectory.appending(path: "catalog-\(UUID().uuidString).json")
        let text = #"{"apps":[{"bundleId":"com.x","appAppleId":1}],"subscriptionGroups":\#(groups),"products":\#(products)}"#
        try? text.write(to: url, atomically: true, encoding: .utf8)
        return url
    }

    @Test func aWrongCatalogNamesTheBadEntry() throws {
        let price = #""prices":[{"storefront":"USA","price":1,"currency":"USD"}]"#
        let cases: [(String, String)] = [
            (#"[{"productId":"a","bundleId":"com.y","type":"Consumable",\#(price)}]"#, #"product "a": no app has bundle id com.y"#),
            (#"[{"productId":"b","bundleId":"com.x","type":"Gift",\#(price)}]"#, #"product "b": type "Gift""#),
            (
                #"[{"productId":"c","bundleId":"com.x","type":"Auto-Renewable Subscription",\#(price),"level":1,"period":"P1M"}]"#,
                #"product "c": an auto-renewable subscription needs a subscriptionGroup"#
            ),
            (
                #"[{"productId":"d","bundleId":"com.x","type":"Auto-Renewable Subscription",\#(price),"subscriptionGroup":"g1","level":1,"period":"P5X"}]"#,
                "P5X"
            ),
            (#"[{"productId":"e","bundleId":"com.x","type":"Consumable","prices":[]}]"#, #"product "e": has no prices"#),
            (
                #"[{"productId":"f","bundleId":"com.x","type":"Consumable",\#(price)},{"productId":"f","bundleId":"com.x","type":"Consumable",\#(price)}]"#,
                #"product "f": product ids must be unique"#
            ),
        ]
        for (products, message) in cases {
            let error = #expect(throws: SimulatorError.self) { try SimulatorCatalog(contentsOf: catalog(products)) }
            #expect(error?.message.contains(message) == true, "\(error?.message ?? "") should say \(message)")
        }
        #expect(throws: SimulatorError.self) { try SimulatorCatalog(contentsOf: URL(fileURLWithPath: "/nonexistent/catalog.json")) }
        _ = try SimulatorHarness.demoCatalog
    }

    @Test func signingKeysPersistInTheStateDirectory() throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "sim-state-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try SigningAuthority(directory: directory)
        let second = try SigningAuthority(directory: directory)
        #expect(first.root == second.root)
        #expect(try first.rootDER == second.rootDER)
        let receipts = try ReceiptSigningAuthority(directory: directory)
        #expect(try ReceiptSigningAuthority(directory: directory).root == receipts.root)
        let key = try FileManager.default.attributesOfItem(atPath: directory.appending(path: "signing-leaf-key.pem").path)
        #expect((key[.posixPermissions] as? Int) == 0o600)

        // A half-written directory is an error, not a silent new root.
        try FileManager.default.removeItem(at: directory.appending(path: "signing-leaf.pem"))
        #expect(throws: SimulatorError.self) { try SigningAuthority(directory: directory) }
    }

    @Test func receiptContainersRoundTripThroughTheVerifier() async throws {
        let authority = try ReceiptSigningAuthority()
        var receipt = AppReceipt()
        receipt.receiptType = "Production"
        receipt.bundleId = "com.x"
        receipt.applicationVersion = "7"
        receipt.creationDate = AppleTimestamp(milliseconds: 1_790_000_000_000)
        var purchase = ReceiptInAppPurchase()
        purchase.productId = "p"
        purchase.transactionId = "1000000000000001"
        purchase.quantity = 3
        purchase.purchaseDate = AppleTimestamp(milliseconds: 1_790_000_000_000)
        purchase.webOrderLineItemId = 42
        purchase.isTrialPeriod = true
        receipt.inAppPurchases = [purchase]
        let signed = try authority.sign(content: AppReceiptEncoder.encode(receipt))
        let verified = try await AppReceiptVerifier(configuration: .init(bundleId: "com.x", roots: [authority.root])).verify(der: signed)
        #expect(verified.inAppPurchases == [purchase])
        #expect(verified.environment == .production)
        // Another authority's root does not accept it.
        await #expect(throws: AppStoreError.self) {
            try await AppReceiptVerifier(configuration: .init(roots: [try ReceiptSigningAuthority().root])).verify(der: signed)
        }
    }
}
