import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle customers set-app-account-token`: checked as the API checks it, queued as the
/// same `app-account-token` job, one per purchase at a time; bad input queues nothing.
@Suite struct SetAppAccountTokenCommandTests {
    @Test func queuesTheAppAccountTokenJobOncePerPurchase() async throws {
        let cli = try await CLI("set-token")
        let catalog = FileManager.default.temporaryDirectory.appendingPathComponent("token-catalog-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: catalog) }
        try Data(
            #"{"publishers":[{"id":"mag","apps":[{"bundleId":"com.mag","environments":["Sandbox"]},{"bundleId":"com.mag.hd","environments":["Sandbox"]}],"offers":[{"offerId":"nov","productIds":["issue.11"],"entitlements":["issue:11"]}]}]}"#
                .utf8
        ).write(to: catalog)
        let jobs = JobQueue(redis: cli.redis, configuration: JobQueueConfiguration(prefix: cli.prefix), logger: TestRedis.logger)
        let token = UUID().uuidString
        func set(_ extra: [String]) async throws -> (status: Int32, output: String, errors: String) {
            try await cli.run(["customers", "set-app-account-token", "--publisher", "mag", "--catalog", catalog.path] + extra)
        }

        let first = try await set(["2000000123", "--token", token, "--bundle-id", "com.mag.hd"])
        #expect(first.status == 0, "\(first.errors)")
        let id = first.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let job = try #require(try await jobs.job(id: id))
        #expect(job.type == "app-account-token")
        let payload = try #require(try JSONSerialization.jsonObject(with: Data(job.payload.utf8)) as? [String: Any])
        #expect(payload["publisher"] as? String == "mag" && payload["originalTransactionId"] as? String == "2000000123")
        #expect(payload["appAccountToken"] as? String == token.lowercased(), "sent to Apple lowercased, as the API sends it")
        #expect(payload["bundleId"] as? String == "com.mag.hd")

        // The same request names the job in flight; another token for that purchase waits for it.
        let again = try await set(["2000000123", "--token", token, "--bundle-id", "com.mag.hd"])
        #expect(again.status == 0 && again.output.trimmingCharacters(in: .whitespacesAndNewlines) == id)
        let other = try await set(["2000000123", "--token", UUID().uuidString, "--bundle-id", "com.mag.hd"])
        #expect(other.status == 1)
        #expect(other.errors.contains("job \(id) for this purchase has not finished"), "\(other.errors)")

        // Refused before anything is queued.
        let before = try await cli.queueStats()
        for (arguments, status, message) in [
            // Usage errors exit 64 (EX_USAGE), as every command but verify.
            (["2000000124", "--token", "not-a-uuid"], Int32(64), "appAccountToken must be a UUID"),
            (["20000x0124", "--token", token], 64, "originalTransactionId must be the App Store's digits"),
            (["2000000124", "--token", token, "--bundle-id", "com.other"], 64, "publisher mag has no app com.other"),
        ] {
            let refused = try await set(arguments)
            #expect(refused.status == status, "\(arguments): \(refused.status) \(refused.errors)")
            #expect(refused.errors.contains(message), "\(arguments): \(refused.errors)")
        }
        let unknown = try await cli.run([
            "customers", "set-app-account-token", "2000000124", "--token", token, "--publisher", "nobody", "--catalog", catalog.path,
        ])
        #expect(unknown.status == 1 && unknown.errors.contains("no publisher nobody"), "\(unknown.errors)")
        let after = try await cli.queueStats()
        #expect(String(describing: after["queued"]) == String(describing: before["queued"]), "\(before) -> \(after)")
    }
}
