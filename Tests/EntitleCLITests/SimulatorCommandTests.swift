import AsyncHTTPClient
import Foundation
import LocalProcesses
import NIOCore
import RedisClient
import RedisTestSupport
import Testing

/// `entitle simulator` as operators start it, and `entitle verify --root` accepting what it signs.
@Suite struct SimulatorCommandTests {
    func fetch(_ url: String, post json: String? = nil) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url)
        if let json {
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        try #require((200..<300).contains(Int(response.status.code)), "\(url) answered \(response.status)")
        return Array(try await response.body.collect(upTo: 1 << 22).readableBytesView)
    }

    @Test func theSimulatorServesAndVerifyAcceptsWhatItSigns() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "sim-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let simulator = try ChildProcess(
            ChildProcess.entitleExecutable, ["simulator", "--port", "0", "--state-dir", directory.appending(path: "keys").path])
        defer { if simulator.isRunning { simulator.signal(SIGKILL) } }
        try await eventually("the simulator to listen") { simulator.output.contains("simulator listening on ") }
        let base = try #require(simulator.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))

        let root = directory.appending(path: "root.cer")
        try Data(try await fetch(base + "/simulator/root.cer")).write(to: root)
        let receiptRoot = directory.appending(path: "receipt-root.cer")
        try Data(try await fetch(base + "/simulator/receipt-root.cer")).write(to: receiptRoot)
        let purchase = try #require(
            try JSONSerialization.jsonObject(
                with: Data(
                    try await fetch(
                        base + "/simulator/purchases",
                        post: #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.premium.monthly"}"#)))
                as? [String: Any])
        let transaction = directory.appending(path: "transaction.jws")
        try (try #require(purchase["signedTransaction"] as? String)).write(to: transaction, atomically: true, encoding: .utf8)
        let receipt = directory.appending(path: "receipt.b64")
        try (try #require(purchase["appReceipt"] as? String)).write(to: receipt, atomically: true, encoding: .utf8)

        let verified = try await ChildProcess.run(ChildProcess.entitleExecutable, ["verify", "--root", root.path, transaction.path])
        #expect(verified.status == 0, "\(verified.output)")
        #expect(verified.output.contains("transaction: valid"))
        let receiptVerified = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["verify", "--root", receiptRoot.path, receipt.path])
        #expect(receiptVerified.status == 0, "\(receiptVerified.output)")
        // Apple's roots do not trust the simulator, and the simulator's roots are not swapped.
        #expect(try await ChildProcess.run(ChildProcess.entitleExecutable, ["verify", transaction.path]).status == 1)
        #expect(
            try await ChildProcess.run(ChildProcess.entitleExecutable, ["verify", "--root", receiptRoot.path, transaction.path]).status == 1
        )

        simulator.signal(SIGTERM)
        #expect(try await simulator.wait(timeout: .seconds(30)) == 0)

        // Restarted on the same state directory, it keeps its root.
        let again = try ChildProcess(
            ChildProcess.entitleExecutable, ["simulator", "--port", "0", "--state-dir", directory.appending(path: "keys").path])
        defer { if again.isRunning { again.signal(SIGKILL) } }
        try await eventually("the simulator to listen again") { again.output.contains("simulator listening on ") }
        let second = try #require(again.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
        #expect(try await fetch(second + "/simulator/root.cer") == Array(try Data(contentsOf: root)))
        again.signal(SIGINT)
        #expect(try await again.wait(timeout: .seconds(30)) == 0)
    }

    /// Newsstand: the sandbox renews 12 times by default (Apple's rule today); the seed's
    /// scenario, written when it was 6, is replayed with `--sandbox-renewal-limit 6`.
    @Test func sandboxSubscriptionsRenewAsOftenAsTheSettingSays() async throws {
        for limit in [nil, 6] as [Int?] {
            let simulator = try ChildProcess(
                ChildProcess.entitleExecutable,
                ["simulator", "--port", "0"] + (limit.map { ["--sandbox-renewal-limit", String($0)] } ?? []))
            defer { if simulator.isRunning { simulator.signal(SIGKILL) } }
            try await eventually("the simulator to listen") { simulator.output.contains("simulator listening on ") }
            let base = try #require(
                simulator.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
            let purchase = try #require(
                try JSONSerialization.jsonObject(
                    with: Data(
                        try await fetch(
                            base + "/simulator/purchases",
                            post:
                                #"{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.basic.monthly","useIntroductoryOffer":false}"#
                        )))
                    as? [String: Any])
            let original = try #require(purchase["originalTransactionId"] as? String)
            // Twenty sandbox months (5 minutes each): more than either limit.
            _ = try await fetch(base + "/simulator/clock/advance", post: #"{"seconds":6000}"#)
            let subscription = try #require(
                try JSONSerialization.jsonObject(with: Data(try await fetch(base + "/simulator/subscriptions/\(original)")))
                    as? [String: Any])
            let transactions = try #require(subscription["transactionIds"] as? [String])
            #expect(transactions.count == 1 + (limit ?? 12), "the purchase and \(limit ?? 12) renewals: \(transactions.count)")
            #expect(subscription["status"] as? Int == 2, "expired after the last renewal: \(subscription["status"] ?? "none")")
            simulator.signal(SIGTERM)
            #expect(try await simulator.wait(timeout: .seconds(30)) == 0)
        }
        let bad = try await ChildProcess.run(ChildProcess.entitleExecutable, ["simulator", "--sandbox-renewal-limit", "0"])
        #expect(bad.status != 0 && bad.errors.contains("--sandbox-renewal-limit must be 1-1000"), "\(bad.errors)")
    }

    @Test func aBadCatalogOrOptionFailsWithAMessage() async throws {
        let catalog = FileManager.default.temporaryDirectory.appending(path: "bad-catalog-\(UUID().uuidString).json")
        try
            #"{"apps":[{"bundleId":"com.x","appAppleId":1}],"products":[{"productId":"p1","bundleId":"com.y","type":"Consumable","prices":[{"storefront":"USA","price":1,"currency":"USD"}]}]}"#
            .write(to: catalog, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: catalog) }
        let bad = try await ChildProcess.run(ChildProcess.entitleExecutable, ["simulator", "--port", "0", "--catalog", catalog.path])
        #expect(bad.status != 0)
        #expect(bad.errors.contains(#"product "p1": no app has bundle id com.y"#), "\(bad.errors)")
        let url = try await ChildProcess.run(ChildProcess.entitleExecutable, ["simulator", "--notify-url", "ftp://x"])
        #expect(url.status != 0)
        #expect(url.errors.contains("ftp://x is not an http(s) URL"))
    }
}
