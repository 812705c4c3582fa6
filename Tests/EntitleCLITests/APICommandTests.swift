import AsyncHTTPClient
import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// `entitle api` as operators start it: production mode, a catalog, secrets from the environment.
@Suite struct APICommandTests {
    /// A production catalog that needs no network: one app with no Apple secrets.
    static func catalog() throws -> String {
        let document: [String: Any] = [
            "publishers": [
                [
                    "id": "acme", "apps": [["bundleId": "com.acme.app", "appAppleId": 123, "environments": ["Production"]]],
                    "offers": [["offerId": "gold", "productIds": ["com.acme.gold"], "entitlements": ["gold"]]],
                    "api": ["tokenVariables": ["ACME_TOKEN_A", "ACME_TOKEN_B"]],
                ]
            ]
        ]
        let path = FileManager.default.temporaryDirectory.appending(path: "api-cli-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func servesWithEitherTokenAndStopsOnSIGTERM() async throws {
        let cli = try await CLI("api-cli")
        let catalog = try Self.catalog()
        defer { try? FileManager.default.removeItem(atPath: catalog) }
        let environment = [
            "ENTITLE_CATALOG": catalog, "ACME_TOKEN_A": "token-a-0123456789", "ACME_TOKEN_B": "token-b-0123456789", "ENTITLE_ENV": "",
        ]
        let api = try ChildProcess(ChildProcess.entitleExecutable, ["api", "--port", "0"] + cli.common, environment: environment)
        defer { if api.isRunning { api.signal(SIGKILL) } }
        try await eventually("the API to listen") { api.output.contains("api listening on ") || !api.isRunning }
        let url = try #require(
            api.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init), "\(api.errors)")
        func status(_ path: String, _ token: String?) async throws -> Int {
            var request = HTTPClientRequest(url: url + path)
            if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            return Int(response.status.code)
        }
        let customer = "/v1/customers/nobody%40example.com/entitlements"
        #expect(try await status("/readyz", nil) == 200)
        #expect(try await status(customer, "token-a-0123456789") == 404, "authenticated: no such customer")
        #expect(try await status(customer, "token-b-0123456789") == 404, "a second token, for rotation")
        #expect(try await status(customer, "token-c-0123456789") == 401)
        api.signal(SIGTERM)
        #expect(try await api.wait(timeout: .seconds(30)) == 0)
        #expect(!api.output.contains("token-a") && !api.errors.contains("token-a"), "secrets are never printed")
    }

    /// A key rotated in its file takes effect on SIGHUP: both keys work during the rotation,
    /// then only the new one; the process never restarts.
    @Test func aKeyRotatedInItsFileTakesEffectOnSIGHUP() async throws {
        let cli = try await CLI("api-rotation")
        let catalog = try Self.catalog()
        let file = FileManager.default.temporaryDirectory.appending(path: "rotation-\(UUID().uuidString)").path
        try "old-key-0123456789\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer {
            try? FileManager.default.removeItem(atPath: catalog)
            try? FileManager.default.removeItem(atPath: file)
        }
        let environment = ["ENTITLE_CATALOG": catalog, "ACME_TOKEN_A_FILE": file, "ACME_TOKEN_B": "token-b-0123456789", "ENTITLE_ENV": ""]
        let api = try ChildProcess(ChildProcess.entitleExecutable, ["api", "--port", "0"] + cli.common, environment: environment)
        defer { if api.isRunning { api.signal(SIGKILL) } }
        try await eventually("the API to listen") { api.output.contains("api listening on ") || !api.isRunning }
        let url = try #require(api.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
        func status(_ token: String) async throws -> Int {
            var request = HTTPClientRequest(url: url + "/v1/customers/nobody%40example.com/entitlements")
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            return Int(response.status.code)
        }
        #expect(try await status("old-key-0123456789") == 404)
        #expect(try await status("new-key-0123456789") == 401)
        try "old-key-0123456789\nnew-key-0123456789\n".write(toFile: file, atomically: true, encoding: .utf8)
        api.signal(SIGHUP)
        try await eventually("the new key to work") { try await status("new-key-0123456789") == 404 }
        #expect(try await status("old-key-0123456789") == 404, "both during the rotation")
        try "new-key-0123456789\n".write(toFile: file, atomically: true, encoding: .utf8)
        api.signal(SIGHUP)
        try await eventually("the old key to be refused") { try await status("old-key-0123456789") == 401 }
        // A file that cannot be read keeps the keys in use, and says so.
        try FileManager.default.removeItem(atPath: file)
        api.signal(SIGHUP)
        try await eventually("the failed reload to be logged") { api.errors.contains("secrets not reloaded") }
        #expect(try await status("new-key-0123456789") == 404)
        #expect(api.isRunning)
        api.signal(SIGTERM)
        #expect(try await api.wait(timeout: .seconds(30)) == 0)
    }

    @Test func aMissingTokenVariableOrCatalogStopsItWithAMessage() async throws {
        let cli = try await CLI("api-cli-bad")
        let catalog = try Self.catalog()
        defer { try? FileManager.default.removeItem(atPath: catalog) }
        let missing = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["api", "--port", "0"] + cli.common,
            environment: ["ENTITLE_CATALOG": catalog, "ACME_TOKEN_A": "token-a-0123456789", "ENTITLE_ENV": ""])
        #expect(missing.status != 0)
        #expect(
            missing.errors.contains("publisher \"acme\" API token: the environment variable ACME_TOKEN_B is not set"), "\(missing.errors)")
        let none = try await ChildProcess.run(
            ChildProcess.entitleExecutable, ["api", "--port", "0"] + cli.common, environment: ["ENTITLE_CATALOG": "", "ENTITLE_ENV": ""])
        #expect(none.status != 0 && none.errors.contains("no catalog"), "\(none.errors)")
        let badPort = try await ChildProcess.run(ChildProcess.entitleExecutable, ["api", "--port", "70000"] + cli.common)
        #expect(badPort.status != 0 && badPort.errors.contains("--port must be 0-65535"))
    }
}
