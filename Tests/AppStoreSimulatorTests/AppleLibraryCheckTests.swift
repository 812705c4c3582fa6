import AppStoreSimulator
import Foundation
import LocalProcesses
import RedisClient
import Testing

/// The independent check: Apple's own Python library (app-store-server-library, in the venv
/// `scripts/test` makes) verifies what the simulator signs and reads its Server API.
@Suite struct AppleLibraryCheckTests {
    static var python: String? {
        if let configured = ProcessInfo.processInfo.environment["ENTITLE_TEST_PYTHON"] { return configured }
        let local = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appending(path: ".build/asl-venv/bin/python").path
        return FileManager.default.isExecutableFile(atPath: local) ? local : nil
    }

    @Test func applesPythonLibraryAcceptsTheSimulator() async throws {
        let python = try #require(
            Self.python, "Apple's Python library is missing: run scripts/test, which makes .build/asl-venv (or set ENTITLE_TEST_PYTHON)")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "python/check_simulator.py").path
        try await SimulatorHarness.run { sim in
            let result = try await ChildProcess.run(python, [script, sim.baseURL], timeout: .seconds(120))
            try #require(result.status == 0, "check_simulator.py failed:\n\(result.errors)")
            let report = try #require(
                (try JSONSerialization.jsonObject(with: Data(result.output.utf8))) as? [String: Any], "unreadable: \(result.output)")
            #expect(report["productId"] as? String == "com.entitle.demo.basic.monthly")
            #expect(report["type"] as? String == "Auto-Renewable Subscription")
            #expect(report["price"] as? Int == 4990)
            #expect(report["consumableQuantity"] as? Int == 3)
            #expect(
                (report["notifications"] as? [[Any]])?.map { $0.map { $0 as? String } } == [
                    ["SUBSCRIBED", "INITIAL_BUY"], ["ONE_TIME_CHARGE", nil], ["DID_CHANGE_RENEWAL_STATUS", "AUTO_RENEW_DISABLED"],
                    ["REFUND", nil],
                ])
            #expect(report["infoRevocationDate"] is Int)
            #expect((report["historyIds"] as? [String])?.count == 2)
            #expect(report["status"] as? Int == 1)
            #expect(report["statusAutoRenewStatus"] as? Int == 0)
        }
    }
}
