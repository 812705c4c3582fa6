import Foundation
import JobQueue
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle import`: a file's good lines queued as receipt jobs (once, however often it is
/// imported), its malformed lines refused each with its message; `entitle import status`
/// reads what became of them.
@Suite struct ImportCommandTests {
    @Test func importsAFileOnceAndSaysWhatItRefused() async throws {
        let cli = try await CLI("import")
        let directory = FileManager.default.temporaryDirectory
        let catalog = directory.appendingPathComponent("import-catalog-\(UUID().uuidString).json")
        let file = directory.appendingPathComponent("import-\(UUID().uuidString).csv")
        let empty = directory.appendingPathComponent("import-empty-\(UUID().uuidString).csv")
        defer { for url in [catalog, file, empty] { try? FileManager.default.removeItem(at: url) } }
        try Data(
            #"{"publishers":[{"id":"mag","apps":[{"bundleId":"com.mag","appAppleId":1234567890,"environments":["Production"]}],"offers":[{"offerId":"nov","productIds":["issue.11"],"entitlements":["issue:11"]}]}]}"#
                .utf8
        ).write(to: catalog)
        try Data("customer,proof\nann@example.com,2000000123\nbob@example.com,2000000124,com.other\nnot an email,2000000125\n".utf8)
            .write(to: file)
        try Data("customer,proof\n\n".utf8).write(to: empty)
        func run(_ arguments: [String]) async throws -> (status: Int32, output: String, errors: String) {
            try await cli.run(["import"] + arguments)
        }

        let first = try await run(["--publisher", "mag", "--catalog", catalog.path, "--json", file.path])
        #expect(first.status == 0, "\(first.errors)")
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(first.output.utf8)) as? [String: Any])
        let id = try #require(summary["importId"] as? String)
        #expect(summary["queued"] as? Int == 1)
        let refused = try #require(summary["refused"] as? [[String: Any]])
        #expect(refused.map { $0["line"] as? Int } == [3, 4], "\(refused)")
        #expect((refused.first?["message"] as? String)?.contains("has no app com.other") == true)

        let stats = try await cli.queueStats()
        let again = try await run(["--publisher", "mag", "--catalog", catalog.path, file.path])
        #expect(again.status == 0 && again.output.contains("import \(id): 1 lines queued, 2 refused"), "\(again.output)")
        #expect(String(describing: try await cli.queueStats()["queued"]) == String(describing: stats["queued"]), "queued once")

        let status = try await run(["--status", id, "--publisher", "mag", "--json"])
        let progress = try #require(try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any], "\(status.errors)")
        #expect(progress["lines"] as? Int == 1 && progress["pending"] as? Int == 1 && progress["refused"] as? Int == 2, "\(progress)")

        let nothing = try await run(["--publisher", "mag", "--catalog", catalog.path, empty.path])
        #expect(nothing.status == 1 && nothing.errors.contains("holds no line"), "\(nothing.errors)")
        let unknown = try await run(["--status", "0123456789abcdef01234567", "--publisher", "mag"])
        #expect(unknown.status == 1 && unknown.errors.contains("mag has no import"), "\(unknown.errors)")
        let missing = try await run(["--publisher", "mag", "--catalog", catalog.path, "/nonexistent/file.csv"])
        #expect(missing.status == 1 && missing.errors.contains("cannot read"), "\(missing.errors)")
    }
}
