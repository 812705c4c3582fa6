import Foundation
import HTTPTestSupport
import RedisTestSupport
import Testing

/// A publisher arriving with the customers it already has: `POST /v1/imports` with lines of
/// each kind (an original transaction id, a signed transaction, an app receipt; CSV and JSON
/// lines) and malformed ones; each good line becomes a purchase of its customer, marked
/// imported and not posted to the webhook; the progress says done, failed with why, pending
/// and refused; the same import again changes nothing.
@Suite struct ImportFlowTests {
    @Test(.timeLimit(.minutes(4))) func linesBecomeCustomersPurchasesOnceWithoutWebhooks() async throws {
        try await APIStack.runWithWebhooks("import", notify: []) { api, hooks in
            let subscription = try await api.buy("premium.monthly", extra: ["useIntroductoryOffer": false])
            let credits = try await api.buy("credits.100")
            let book = try await api.buy("issue.2026.11", account: "cal-account")
            let pass = try await api.buy("pass.30days")
            let text = [
                "customer,proof",
                "ann@example.com,\(try #require(subscription["originalTransactionId"] as? String))",
                "bob@example.com,\(try #require(credits["signedTransaction"] as? String))",
                "cal@example.com,\(try #require(book["appReceipt"] as? String))",
                #"{"customer":"eve@example.com","originalTransactionId":"\#(try #require(pass["transactionId"] as? String))"}"#,
                "fay@example.com,2000000999999999",  // Apple knows no such purchase
                "not an email,2000000123",
                "dan@example.com,12ab",
                #"{"customer":"gus@example.com"}"#,
                "",
            ].joined(separator: "\n")
            func post(_ body: String, query: String = "") async throws -> APIStack.Reply {
                try await api.call(.POST, "/v1/imports" + query, body: body, route: "POST /v1/imports")
            }
            let reply = try await post(text)
            #expect(reply.status == 202, "\(reply.text)")
            let importId = try #require(reply.json["importId"] as? String)
            #expect(reply.json["queued"] as? Int == 5)
            let refused = try #require(reply.json["refused"] as? [[String: Any]])
            #expect(refused.map { $0["line"] as? Int } == [7, 8, 9], "\(refused)")
            #expect((refused.first?["message"] as? String)?.contains("email") == true)
            try await api.settle()

            let progress = try await api.call(.GET, "/v1/imports/\(importId)", route: "GET /v1/imports/{id}").json
            #expect(progress["done"] as? Int == 4 && progress["failed"] as? Int == 1 && progress["pending"] as? Int == 0, "\(progress)")
            #expect(progress["refused"] as? Int == 3 && progress["lines"] as? Int == 5)
            let failure = try #require((progress["failures"] as? [[String: Any]])?.first)
            #expect(failure["line"] as? Int == 6 && (failure["message"] as? String)?.isEmpty == false, "\(failure)")
            #expect(try await api.access("ann@example.com", "premium"))
            #expect((try await api.customer("bob@example.com")["credits"] as? [String: Any])?["balance"] as? Int == 100)
            #expect(try await api.access("cal@example.com", "issue-2026-11"))
            #expect(try await api.access("eve@example.com", "pass-30"))
            let events = try await api.events("bob@example.com")
            #expect(!events.isEmpty && events.allSatisfy { $0["imported"] as? Bool == true }, "\(events)")
            #expect(await hooks.entries.filter { $0.path == "/hooks" }.isEmpty, "imported purchases are not news")

            // Two lines naming one purchase: the later claim moves it, and the move is the
            // import's too, marked imported and not news.
            let shared = try #require(
                try await api.buy("premium.monthly", account: "ivy-account", extra: ["useIntroductoryOffer": false])[
                    "originalTransactionId"]
                    as? String)
            #expect(try await post("ivy@example.com,\(shared)\njon@example.com,\(shared)").status == 202)
            try await api.settle()
            let moved = try await api.events("ivy@example.com") + api.events("jon@example.com")
            let transfer = try #require(moved.first { $0["type"] as? String == "transfer" }, "\(moved.map { $0["type"] ?? "?" })")
            #expect(transfer["imported"] as? Bool == true, "\(transfer)")
            #expect(await hooks.entries.filter { $0.path == "/hooks" }.isEmpty, "an import's move is not news either")

            // The same import again: the same jobs, nothing twice.
            let again = try await post(text)
            #expect(again.status == 202 && again.json["importId"] as? String == importId)
            try await api.settle()
            #expect((try await api.customer("bob@example.com")["credits"] as? [String: Any])?["balance"] as? Int == 100)
            #expect(try await api.events("bob@example.com").count == events.count)

            // Asked for, an import's events reach the webhook, marked imported.
            let more = try await api.buy("credits.100")
            let withHooks = try await post(
                "hal@example.com,\(try #require(more["signedTransaction"] as? String))", query: "?webhooks=true")
            #expect(withHooks.status == 202)
            try await api.settle()
            let bodies = await hooks.wait(for: "/hooks", count: 2, timeout: .seconds(30)).compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any]
            }
            #expect(bodies.allSatisfy { $0["imported"] as? Bool == true && $0["customer"] as? String == "hal@example.com" }, "\(bodies)")
            for body in bodies { #expect(OpenAPIDocument.shared.checkWebhook(body).isEmpty) }

            // Nothing importable: a 400 and nothing written; an unknown import is a 404.
            let nothing = try await post("customer,proof\nnot an email,12")
            #expect(nothing.status == 400 && nothing.message.contains("line 2"), "\(nothing.text)")
            #expect(try await api.call(.GET, "/v1/imports/0123456789abcdef01234567").status == 404)
            #expect(try await api.call(.GET, "/v1/imports/\(importId)", token: APIStack.otherToken).status == 404)
        }
    }
}
