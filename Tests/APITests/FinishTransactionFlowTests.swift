import Foundation
import RedisTestSupport
import Testing

/// Finish Transaction (API 1.20), per app and off by default: once a consumable's credits
/// are granted, the receipt job tells Apple (the simulator records it).
@Suite struct FinishTransactionFlowTests {
    @Test(.timeLimit(.minutes(3)), arguments: [true, false])
    func aConsumableIsFinishedAtAppleOnlyWhenTheAppAsks(finishes: Bool) async throws {
        try await APIStack.run(
            "finish-\(finishes)", worker: true,
            catalog: { publishers in
                guard finishes, var apps = publishers[0]["apps"] as? [[String: Any]], !apps.isEmpty else { return }
                apps[0]["finishTransactions"] = true
                publishers[0]["apps"] = apps
            }
        ) { api in
            let bought = try await api.buy("credits.100")
            let id = try #require(bought["transactionId"] as? String)
            let claimed = try await api.claim([
                "customer": "fin@example.com", "signedTransaction": try #require(bought["signedTransaction"] as? String),
            ])
            #expect((claimed["credits"] as? [String: Any])?["added"] as? Int == 100, "\(claimed)")
            let state = try await api.simulator("/simulator/transactions/\(id)")
            if finishes {
                #expect(claimed["finished"] as? Bool == true, "\(claimed)")
                #expect(state["finishedDate"] is Double || state["finishedDate"] is Int, "\(state)")
            } else {
                #expect(claimed["finished"] == nil, "\(claimed)")
                #expect(state["finishedDate"] == nil, "off by default: \(state)")
            }
        }
    }
}
