import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle reconcile`: queues the publisher's `reconcile` job, one at a time per publisher;
/// bad input queues nothing, with a message and a non-zero exit.
@Suite struct ReconcileCommandTests {
    @Test func queuesOneReconcileAtATimeAndRefusesBadInput() async throws {
        let cli = try await CLI("reconcile")
        let catalog = FileManager.default.temporaryDirectory.appendingPathComponent("reconcile-catalog-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: catalog) }
        try Data(
            #"""
            {"publishers":[
              {"id":"mag","apps":[{"bundleId":"com.mag","appAppleId":1234567890,"environments":["Production"],"apiKey":{"keyId":"K1","issuerId":"I1","privateKeyVariable":"MAG_KEY"}}],
               "offers":[{"offerId":"nov","productIds":["issue.11"],"entitlements":["issue:11"]}]},
              {"id":"nokey","apps":[{"bundleId":"com.nokey","appAppleId":1234567899,"environments":["Production"]}],"offers":[]}]}
            """#.utf8
        ).write(to: catalog)
        let jobs = JobQueue(redis: cli.redis, configuration: JobQueueConfiguration(prefix: cli.prefix), logger: TestRedis.logger)
        func reconcile(_ extra: [String]) async throws -> (status: Int32, output: String, errors: String) {
            try await cli.run(["reconcile", "--catalog", catalog.path] + extra)
        }

        let first = try await reconcile(["--publisher", "mag", "--since", "2026-11-01", "--until", "2026-11-02T12:00:00Z"])
        #expect(first.status == 0, "\(first.errors)")
        let id = first.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let job = try #require(try await jobs.job(id: id))
        #expect(job.type == "reconcile")
        let payload = try #require(try JSONSerialization.jsonObject(with: Data(job.payload.utf8)) as? [String: Any])
        #expect(payload["publisher"] as? String == "mag")
        #expect(payload["since"] as? String == "2026-11-01T00:00:00Z" && payload["until"] as? String == "2026-11-02T12:00:00Z")
        // One at a time: while it waits, another names it.
        let again = try await reconcile(["--publisher", "mag"])
        #expect(again.status == 0 && again.output.trimmingCharacters(in: .whitespacesAndNewlines) == id)
        #expect(again.errors.contains("a reconcile of mag is under way: job \(id)"), "\(again.errors)")
        // A window of one's own while another runs: not run, and said so.
        let window = try await reconcile(["--publisher", "mag", "--since", "2026-10-01"])
        #expect(window.status == 1 && window.errors.contains("run this window again once it has finished"), "\(window.errors)")

        let before = try await cli.queueStats()
        for (arguments, status, message) in [
            (["--publisher", "mag", "--since", "yesterday"], Int32(64), "--since takes an ISO 8601 moment"),
            (["--publisher", "mag", "--since", "2026-11-02", "--until", "2026-11-01"], 64, "--since must be before --until"),
            (["--publisher", "mag", "--wait", "5000"], 64, "--wait must be 0 to 3600 seconds"),
            (["--publisher", "nobody"], 1, "no publisher nobody"),
            (["--publisher", "nokey"], 1, "has no app with an App Store Server API key"),
        ] {
            let refused = try await reconcile(arguments)
            #expect(refused.status == status, "\(arguments): \(refused.status) \(refused.errors)")
            #expect(refused.errors.contains(message), "\(arguments): \(refused.errors)")
        }
        let after = try await cli.queueStats()
        #expect(String(describing: after["queued"]) == String(describing: before["queued"]), "\(before) -> \(after)")
    }

    /// `entitle customers resync`: a customer the store does not have, or a publisher the
    /// catalog does not, is refused with a message, and nothing is queued.
    @Test func resyncRefusesWhatItCannotDo() async throws {
        let cli = try await CLI("resync")
        let catalog = FileManager.default.temporaryDirectory.appendingPathComponent("resync-catalog-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: catalog) }
        try Data(
            #"{"publishers":[{"id":"mag","apps":[{"bundleId":"com.mag","appAppleId":1234567890,"environments":["Production"]}],"offers":[]}]}"#
                .utf8
        ).write(to: catalog)
        let before = try await cli.queueStats()
        for (arguments, status, message) in [
            (["ann@example.com", "--publisher", "mag"], Int32(1), "mag has no customer ann@example.com"),
            (["ann@example.com", "--publisher", "nobody"], 1, "no publisher nobody"),
            (["", "--publisher", "mag"], 64, "CUSTOMER must have 1 to 256 bytes"),
        ] {
            let refused = try await cli.run(["customers", "resync", "--catalog", catalog.path] + arguments)
            #expect(refused.status == status, "\(arguments): \(refused.status) \(refused.errors)")
            #expect(refused.errors.contains(message), "\(arguments): \(refused.errors)")
        }
        let after = try await cli.queueStats()
        #expect(String(describing: after["queued"]) == String(describing: before["queued"]))
    }
}
