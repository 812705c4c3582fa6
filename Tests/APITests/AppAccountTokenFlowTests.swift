import Foundation
import RedisTestSupport
import Testing

/// Set App Account Token through the API: the publisher binds a purchase made outside the
/// app to a customer's token; the worker tells Apple (the simulator), and the next
/// transaction carries it.
@Suite struct AppAccountTokenFlowTests {
    /// A JWS's payload, read without verifying (the test only looks).
    static func payload(_ jws: String) throws -> [String: Any] {
        let parts = jws.split(separator: ".")
        try #require(parts.count == 3)
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let data = try #require(Data(base64Encoded: base64))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    func set(_ api: APIStack, _ original: String, _ token: String) async throws -> [String: Any] {
        let reply = try await api.call(
            .PUT, "/v1/purchases/\(original)/appAccountToken", json: ["appAccountToken": token],
            route: "PUT /v1/purchases/{originalTransactionId}/appAccountToken")
        try #require(reply.status == 202, "\(reply.status): \(reply.text)")
        return try await api.finished(try #require(reply.json["jobId"] as? String))
    }

    @Test(.timeLimit(.minutes(3))) func aTokenSetThroughTheRouteArrivesOnTheNextTransaction() async throws {
        try await APIStack.run("app-account-token", worker: true) { api in
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            #expect(try Self.payload(try #require(bought["signedTransaction"] as? String))["appAccountToken"] == nil)
            let token = UUID().uuidString.lowercased()
            let job = try await set(api, original, token)
            #expect(job["status"] as? String == "succeeded", "\(job)")
            #expect((job["result"] as? [String: Any])?["environment"] as? String == "Production", "\(job)")

            let renewed = try await api.simulator("/simulator/subscriptions/\(original)/renew", "{}")
            let next = try Self.payload(try #require(renewed["signedTransaction"] as? String))
            #expect(next["transactionId"] as? String != bought["transactionId"] as? String)
            #expect(next["appAccountToken"] as? String == token, "\(next)")

            // Apple refuses a renewal's id (not an original transaction id): the job says Apple's code.
            let refused = try await set(api, try #require(next["transactionId"] as? String), token)
            #expect(refused["status"] as? String == "failed", "\(refused)")
            #expect("\(refused)".contains("4000187"), "\(refused)")
            // A token that is not a UUID never reaches a job.
            let bad = try await api.call(
                .PUT, "/v1/purchases/\(original)/appAccountToken", json: ["appAccountToken": "ann"],
                route: "PUT /v1/purchases/{originalTransactionId}/appAccountToken")
            #expect(bad.status == 400)
        }
    }
}
