import AsyncHTTPClient
import Crypto
import Foundation
import LocalProcesses
import NIOCore
import RedisClient
import RedisTestSupport
import Testing

/// A full run at trace level (simulator, API, worker, a Redis with a password), with every
/// kind of secret configured and used, then a search of everything the processes printed
/// for each secret.
@Suite struct SecretsInLogsTests {
    static let secrets = [
        "ENTITLE_DEMO_API_TOKEN": "secret-key-7f3a9c1e5b",
        "ENTITLE_DEMO_APP_KEY": "app-key-2d8e4f6a0c",
        "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET": "customer-token-secret-9b1d3f5e7a",
        "ENTITLE_DEMO_CLEENG_BASIC": "cleeng-user:cleeng-password-4c6e8a0b2d",
        "ENTITLE_ADMIN_TOKEN": "admin-token-1a3c5e7f9b",
        "ENTITLE_DEMO_SHARED_SECRET": "demo-shared-secret-0123456789abcdef",
        "ENTITLE_DEMO_WEBHOOK_SECRET": "webhook-secret-6e8a0c2d4f",
        "ENTITLE_SOFTPHONE_API_TOKEN": "softphone-key-5d7f9b1c3e",
        "ENTITLE_SOFTPHONE_APP_KEY": "softphone-app-key-8c0e2a4f6b",
    ]

    @Test(.timeLimit(.minutes(3))) func noSecretReachesAnyLogAtTraceLevel() async throws {
        let redisPassword = "redis-password-3f5a7c9e1b"
        let redisPort = try LocalRedisServer.freePort()
        let directory = FileManager.default.temporaryDirectory.appending(path: "secrets-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let redis = try ChildProcess(
            "/usr/bin/redis-server",
            ["--port", String(redisPort), "--bind", "127.0.0.1", "--requirepass", redisPassword, "--save", "", "--dir", directory])
        defer { redis.signal(SIGKILL) }
        let redisURL = "redis://:\(redisPassword)@127.0.0.1:\(redisPort)"

        // The webhook receiver, and the ports the processes will take.
        let receiver = try ChildProcess("/usr/bin/python3", ["-c", Self.receiver])
        defer { receiver.signal(SIGKILL) }
        try await eventually("the receiver to listen") { receiver.output.contains("listening") || !receiver.isRunning }
        let receiverPort = try #require(receiver.output.split(whereSeparator: \.isWhitespace).last.map(String.init))
        let apiPort = try LocalRedisServer.freePort()
        let api = "http://127.0.0.1:\(apiPort)"

        // An In-App Purchase key of the publisher's, registered with the simulator as Apple would know it.
        let key = P256.Signing.PrivateKey()
        var environment = Self.secrets
        environment["ENTITLE_DEMO_API_KEY"] = key.pemRepresentation
        let catalog = try Self.catalog(webhook: "http://127.0.0.1:\(receiverPort)/hook", directory: directory)
        environment.merge(["ENTITLE_ENV": "development", "ENTITLE_CATALOG": catalog, "ENTITLE_REDIS_URL": redisURL]) { $1 }

        let simulator = try ChildProcess(
            ChildProcess.entitleExecutable,
            [
                "simulator", "--port", "0", "--notify-url", api + "/v1/notifications/apple/demo", "--notify-url-v1",
                api + "/v1/notifications/apple/demo", "--log-level", "trace",
            ])
        defer { if simulator.isRunning { simulator.signal(SIGKILL) } }
        try await eventually("the simulator to listen") { simulator.output.contains("simulator listening on ") || !simulator.isRunning }
        let simulatorURL = try #require(
            simulator.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
        environment["ENTITLE_SIMULATOR_URL"] = simulatorURL
        _ = try await Self.call(
            simulatorURL + "/simulator/keys",
            json: [
                "keyId": "KEY1234567", "issuerId": "issuer-1", "bundleId": "com.entitle.demo", "publicKey": key.publicKey.pemRepresentation,
            ])

        let keyPrefix = TestRedis.uniquePrefix("secrets")
        let prefix = ["--prefix", keyPrefix, "--log-level", "trace"]
        let apiProcess = try ChildProcess(
            ChildProcess.entitleExecutable, ["api", "--port", String(apiPort)] + prefix, environment: environment)
        defer { if apiProcess.isRunning { apiProcess.signal(SIGKILL) } }
        let worker = try ChildProcess(
            ChildProcess.entitleExecutable, ["worker", "--queues", "default=4"] + prefix, environment: environment)
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        try await eventually("the API to listen") { apiProcess.output.contains("api listening on ") || !apiProcess.isRunning }

        // Everything that uses a secret: purchases with both kinds of key, Cleeng's route, V1
        // and V2 notifications (the simulator posts them), a webhook, the operators' routes,
        // refusals, and a reload of every secret.
        let bought = try await Self.call(
            simulatorURL + "/simulator/purchases", json: ["bundleId": "com.entitle.demo", "productId": "com.entitle.demo.premium.monthly"])
        let signed = try #require(bought["signedTransaction"] as? String)
        let token = try #require(Self.secrets["ENTITLE_DEMO_API_TOKEN"])
        let job = try #require(
            try await Self.call(api + "/v1/purchases", json: ["customer": "ann@example.com", "signedTransaction": signed], bearer: token)[
                "jobId"]
                as? String)
        let result = try await Self.call(api + "/v1/jobs/\(job)?wait=20", bearer: token)
        #expect(result["status"] as? String == "succeeded", "\(result)")
        let appKey = try #require(Self.secrets["ENTITLE_DEMO_APP_KEY"])
        let customerToken = Self.customerToken("bob@example.com", secret: try #require(Self.secrets["ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET"]))
        _ = try await Self.call(
            api + "/v1/purchases", json: ["signedTransaction": signed], bearer: appKey, headers: ["X-Customer-Token": customerToken])
        let basic = try #require(Self.secrets["ENTITLE_DEMO_CLEENG_BASIC"])
        _ = try await Self.call(
            api + "/apple/payment", json: ["customerEmail": "carl@example.com"], allowFailure: true,
            headers: ["X-Publisher-Token": token, "Authorization": "Basic " + Data(basic.utf8).base64EncodedString()])
        _ = try await Self.call(api + "/v1/queues", bearer: try #require(Self.secrets["ENTITLE_ADMIN_TOKEN"]))
        _ = try await Self.call(api + "/v1/queues", allowFailure: true, bearer: token + "x")
        try await eventually("a webhook delivery", timeout: .seconds(30)) { receiver.output.contains("POST /hook") }
        let connection = RedisConnection(
            configuration: try RedisConfiguration(url: redisURL), name: "secrets-test", logger: TestRedis.logger)
        try await eventually("the simulator's V1 and V2 notifications to be applied", timeout: .seconds(30)) {
            let done = try await connection.send(["HGET", "\(keyPrefix):{default}:stats", "succeeded:notification"]).string
            return Int(done ?? "0") ?? 0 >= 2
        }
        await connection.disconnect()
        for process in [apiProcess, worker] { process.signal(SIGHUP) }
        try await eventually("both to reload") {
            apiProcess.errors.contains("secrets reloaded") && worker.errors.contains("secrets reloaded")
        }
        for process in [apiProcess, worker, simulator] {
            process.signal(SIGTERM)
            #expect(try await process.wait(timeout: .seconds(30)) == 0)
        }

        let printed = [apiProcess, worker, simulator].map { $0.output + $0.errors }.joined(separator: "\n")
        #expect(printed.contains("trace") || printed.contains("debug"), "the logs are at trace level")
        var shown: [String] = []
        for (variable, secret) in Self.secrets where printed.contains(secret) { shown.append(variable) }
        if printed.contains(Data(basic.utf8).base64EncodedString()) { shown.append("Cleeng Basic, base64") }
        if printed.contains(redisPassword) { shown.append("the Redis password") }
        let keyBody = key.pemRepresentation.split(separator: "\n")[1]
        if printed.contains(keyBody) { shown.append("the In-App Purchase key") }
        if printed.contains(customerToken) { shown.append("a customer token") }
        let lines = printed.split(separator: "\n").filter { line in Self.secrets.values.contains { line.contains($0) } }.prefix(3)
        #expect(shown.isEmpty, "printed: \(shown), as in: \(lines.map { String($0.prefix(600)) })")
    }

    /// The development catalog with every credential the demo publisher can have.
    static func catalog(webhook: String, directory: String) throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var document = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: root.appending(path: "Config/catalog.development.json")))
                as? [String: Any])
        var publishers = try #require(document["publishers"] as? [[String: Any]])
        var demo = publishers[0]
        var access = demo["api"] as? [String: Any] ?? [:]
        access["appKeys"] = [["id": "ios", "variable": "ENTITLE_DEMO_APP_KEY"]]
        access["customerTokens"] = ["keys": [["kid": "k1", "algorithm": "HS256", "secretVariable": "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET"]]]
        demo["api"] = access
        demo["webhook"] = ["url": webhook, "secretVariable": "ENTITLE_DEMO_WEBHOOK_SECRET"]
        var apps = demo["apps"] as? [[String: Any]] ?? []
        apps[0]["apiKey"] = ["keyId": "KEY1234567", "issuerId": "issuer-1", "privateKeyVariable": "ENTITLE_DEMO_API_KEY"]
        demo["apps"] = apps
        publishers[0] = demo
        document["publishers"] = publishers
        let path = directory + "/catalog.json"
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A webhook endpoint that prints each request line and answers 200.
    static let receiver = """
        import http.server, sys
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get('Content-Length', 0)))
                print(self.command, self.path, flush=True)
                self.send_response(200); self.end_headers()
            def log_message(self, *args): pass
        server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
        print('listening', server.server_address[1], flush=True)
        server.serve_forever()
        """

    static func customerToken(_ customer: String, secret: String) -> String {
        func base64url(_ data: some DataProtocol) -> String {
            Data(data).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let now = Int(Date().timeIntervalSince1970)
        let input =
            base64url(Data(#"{"alg":"HS256","kid":"k1"}"#.utf8)) + "."
            + base64url(Data(#"{"aud":"demo","exp":\#(now + 600),"iat":\#(now),"sub":"\#(customer)"}"#.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return input + "." + base64url(Data(mac))
    }

    @discardableResult
    static func call(
        _ url: String, json: [String: Any]? = nil, allowFailure: Bool = false, bearer: String? = nil, headers: [String: String] = [:]
    ) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url)
        if let json {
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json)))
        }
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(40))
        let body = try await response.body.collect(upTo: 1 << 22)
        try #require(allowFailure || (200..<300).contains(response.status.code), "\(url): \(response.status) \(String(buffer: body))")
        return (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]) ?? [:]
    }
}
