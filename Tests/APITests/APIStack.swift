import AppStore
import AppStoreSimulator
import AsyncHTTPClient
import Crypto
import DurationUnits
import EntitleCore
import EntitlementJobs
import Foundation
import HTTPAPI
import HTTPTestSupport
import Hummingbird
import JobQueue
import Logging
import NIOCore
import NIOHTTP1
import RedisClient
import RedisTestSupport
import Testing

/// A real API on loopback over a real Redis, with a real simulator (in this process) as
/// the App Store and, when asked, a real worker running the entitlement jobs.
///
/// Every response a test reads through `call` is checked against `docs/openapi.json`.
struct APIStack: Sendable {
    static let demoToken = "demo-token-0123456789"
    static let otherToken = "other-token-0123456789"
    static let limitedToken = "limited-token-0123456789"
    static let adminToken = "admin-token-0123456789"
    static let softphoneToken = "softphone-token-0123456789"
    /// What Cloud Softphone's app puts in its validation URL: the softphone publisher's app key.
    static let softphoneAppKey = "softphone-app-key-0123456789"
    static let keepToken = "keep-token-0123456789"
    static let shareToken = "share-token-0123456789"
    static let cleengBasic = "demo-user:demo-password"
    /// The demo app's key (public by design) and the secret its backend signs customer tokens with.
    static let appKey = "app-key-demo-0123456789"
    static let otherAppKey = "app-key-other-0123456789"
    static let customerTokenSecret = "customer-token-secret-0123456789"

    let url: String
    let simulatorURL: String
    let jobQueue: JobQueue
    /// What the simulator posted as notifications (V2 at `/v2`, V1 at `/v1`).
    let inbox: RequestLog
    /// Hands the simulator's V2 notifications on to the API, as Apple would.
    let forwarder: Forwarder
    /// The routes the API registered (`GET /v1/jobs/{id}`).
    let routes: [String]
    let api: EntitleAPI
    /// What the worker's folder does: the reports, folded from the event log on demand.
    let reports: ReportFolder
    let settings: EntitleConfiguration

    /// Serves the API as `entitle api` does (its own server settings) on a free loopback port.
    static func serve(
        _ api: EntitleAPI, eventLoopGroup: (any EventLoopGroup)? = nil, _ body: @Sendable (String) async throws -> Void
    ) async throws {
        let (urls, listening) = AsyncStream<String>.makeStream()
        let application = api.makeApplication(
            host: "127.0.0.1", port: 0, eventLoopGroup: eventLoopGroup.map { .shared($0) } ?? .singleton
        ) { listening.yield($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await application.run() }
            var iterator = urls.makeAsyncIterator()
            guard let url = await iterator.next() else { throw CancellationError() }
            try await body(url)
            group.cancelAll()
        }
    }

    /// Minting signing keys is slow in debug builds: one pair for every test.
    static let authorities = Result { (try SigningAuthority(), try ReceiptSigningAuthority()) }

    /// - Parameter notify: publishers whose notification route gets each V2 notification the
    ///   simulator sends (as Apple would post it to each publisher's URL); none: they stay in `inbox`.
    /// - Parameter notifyV1: the V1 notifications (with their receipts) go there too.
    /// - Parameter notifyV2: the V2 notifications go there (false: V1 alone, as a publisher
    ///   whose App Store Connect URL takes version 1).
    /// - Parameter serviceHooks: sets the worker's entitlement service's fault points.
    static func run(
        _ name: String, worker: Bool = false, sweep: Bool = false, adminToken: String? = adminToken, redisDown: Bool = false,
        notify: [String] = [], notifyV1: Bool = false, notifyV2: Bool = true, eventLoopGroup: (any EventLoopGroup)? = nil,
        environment extra: [String: String] = [:], configure: @Sendable (inout EntitleAPI.Configuration) -> Void = { _ in },
        catalog change: @Sendable (inout [[String: Any]]) -> Void = { _ in },
        settings tune: @Sendable (inout EntitleConfiguration) -> Void = { _ in },
        service serviceHooks: @Sendable (inout EntitlementService) -> Void = { _ in }, _ body: @Sendable (APIStack) async throws -> Void
    ) async throws {
        let inbox = RequestLog()
        let forwarder = Forwarder(publishers: notify)
        let receiver = Router()
        receiver.post("v2") { request, _ -> Response in
            let entry = try await inbox.record(request)
            if notifyV2 { try await forwarder.forward(entry.body) }
            return Response(status: .ok)
        }
        receiver.post("v1") { request, _ -> Response in
            let entry = try await inbox.record(request)
            if notifyV1 { try await forwarder.forward(entry.body) }
            return Response(status: .ok)
        }
        // The demo's simulator catalog with apps for `keep` and `share` (an app belongs to one publisher).
        let simulatorCatalog = try DemoCatalogs.writeSimulatorCatalog()
        defer { try? FileManager.default.removeItem(atPath: simulatorCatalog) }
        try await LoopbackServer.run(receiver) { receiverURL in
            var configuration = SimulatorServer.Configuration(
                catalog: try SimulatorCatalog(contentsOf: URL(fileURLWithPath: simulatorCatalog)))
            configuration.port = 0
            configuration.authorities = try authorities.get()
            configuration.notifications = .init(url: receiverURL + "/v2", v1URL: receiverURL + "/v1")
            let (ports, listening) = AsyncStream<Int>.makeStream()
            var quiet = Logger(label: "api-test")
            quiet.logLevel = .critical
            let simulator = try SimulatorServer(configuration: configuration, logger: quiet) { listening.yield($0) }
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await simulator.run() }
                var iterator = ports.makeAsyncIterator()
                guard let port = await iterator.next() else { throw CancellationError() }
                let simulatorURL = "http://127.0.0.1:\(port)"
                let catalog = try writeCatalog(change)
                defer { try? FileManager.default.removeItem(atPath: catalog) }
                var environment = [
                    "ENTITLE_ENV": "development", "ENTITLE_SIMULATOR_URL": simulatorURL, "ENTITLE_DEMO_API_TOKEN": demoToken,
                    "ENTITLE_DEMO_CLEENG_BASIC": cleengBasic, "ENTITLE_OTHER_TOKEN": otherToken,
                    "ENTITLE_LIMITED_TOKEN": limitedToken, "ENTITLE_DEMO_APP_KEY": appKey, "ENTITLE_OTHER_APP_KEY": otherAppKey,
                    "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET": customerTokenSecret, "ENTITLE_SOFTPHONE_API_TOKEN": softphoneToken,
                    "ENTITLE_KEEP_TOKEN": keepToken, "ENTITLE_SHARE_TOKEN": shareToken, "ENTITLE_SOFTPHONE_APP_KEY": softphoneAppKey,
                ]
                if let adminToken { environment["ENTITLE_ADMIN_TOKEN"] = adminToken }
                environment.merge(extra) { $1 }
                var loaded = try await EntitleConfiguration.load(catalogPath: catalog, environment: environment, logger: TestRedis.logger)
                tune(&loaded)
                let settings = loaded
                var redis = try await TestRedis.configuration()
                if redisDown {
                    // Nothing listens on port 1: every Redis call fails at once.
                    redis = try RedisConfiguration(url: "redis://127.0.0.1:1")
                    redis.reconnectTimeout = .zero
                }
                let jobQueue = JobQueue(
                    redis: RedisConnectionPool(configuration: redis, maximumConnections: 8, logger: TestRedis.logger),
                    configuration: JobQueueConfiguration(prefix: TestRedis.uniquePrefix(name)), logger: TestRedis.logger)
                var apiConfiguration = EntitleAPI.Configuration()
                apiConfiguration.maxBodyBytes = 256 << 10
                // Suites send many refused requests from 127.0.0.1 on purpose; tests of the limit set their own.
                apiConfiguration.failedAuthenticationLimit = (100_000, 100_000)
                configure(&apiConfiguration)
                let api = try EntitleAPI(
                    settings: settings, jobQueue: jobQueue, configuration: apiConfiguration,
                    metrics: { Array("entitle_test_metric 1\n".utf8) }, logger: TestRedis.logger)
                var workerService: WorkerService?
                if worker {
                    var handlers = JobHandlerRegistry.builtIn()
                    var service = EntitlementService(configuration: settings, jobQueue: jobQueue, logger: TestRedis.logger)
                    serviceHooks(&service)
                    EntitlementJobs.register(in: &handlers, service: service)
                    var settings = QueueConsumer.Settings(concurrency: 8)
                    settings.blockTimeout = .milliseconds(200)
                    var workerConfiguration = WorkerService.Configuration(queues: ["default": settings])
                    workerConfiguration.promoteInterval = .milliseconds(50)
                    workerService = WorkerService(
                        configuration: workerConfiguration, jobQueue: jobQueue, registry: handlers, logger: TestRedis.logger)
                }
                if let workerService { tasks.addTask { try await workerService.run() } }
                defer { workerService?.stop() }
                let store = EntitlementStore(redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, logger: TestRedis.logger)
                let folder = ReportFolder(store: store, catalog: settings.catalog, interval: .milliseconds(200), logger: TestRedis.logger)
                // The worker's folder keeps the reports as the tests run (they also fold on demand).
                if worker { tasks.addTask { try await folder.run() } }
                // The worker's renewal sweep, for tests that let it queue the checks due as the
                // App Store's clock moves (others sweep by hand, at the moments they choose).
                if worker && sweep {
                    let renewals = RenewalSweep(
                        service: EntitlementService(configuration: settings, jobQueue: jobQueue, logger: TestRedis.logger),
                        queue: "default", interval: .milliseconds(200), logger: TestRedis.logger)
                    tasks.addTask { try await renewals.run() }
                }
                try await Self.serve(api, eventLoopGroup: eventLoopGroup) { url in
                    await forwarder.start(apiURL: url)
                    try await body(
                        APIStack(
                            url: url, simulatorURL: simulatorURL, jobQueue: jobQueue, inbox: inbox, forwarder: forwarder,
                            routes: api.routes, api: api, reports: folder, settings: settings))
                }
                tasks.cancelAll()
            }
        }
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The development catalog (`demo`, `softphone`), plus `other` (its own token and app),
    /// `limited` (a rate limit of one request per 5 s, two at once: slow enough that a loaded
    /// machine cannot refill it mid-test), and `keep` and `share` (demo's offers under the other
    /// transfer policies, each through its own app: an app belongs to one publisher).
    static func writeCatalog(_ change: (inout [[String: Any]]) -> Void = { _ in }) throws -> String {
        var document = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: root.appending(path: "Config/catalog.development.json")))
                as? [String: Any])
        var publishers = try #require(document["publishers"] as? [[String: Any]])
        var demo = publishers[0]
        demo["api"] = [
            "tokenVariables": ["ENTITLE_DEMO_API_TOKEN"],
            "appKeys": [["id": "ios", "variable": "ENTITLE_DEMO_APP_KEY", "bundleIds": ["com.entitle.demo"]]],
            "customerTokens": [
                "keys": [["kid": "k1", "algorithm": "HS256", "secretVariable": "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET"]],
                "maxLifetimeSeconds": 3600,
            ],
            "cleeng": ["basicAuthVariable": "ENTITLE_DEMO_CLEENG_BASIC"],
            "rateLimit": ["perSecond": 10_000, "burst": 10_000], "validation": ["waitSeconds": 15],
        ]
        var other = publishers[0]
        other["id"] = "other"
        other["customerIdentity"] = "username"
        other["apps"] = [["bundleId": "com.example.other", "environments": ["Sandbox"]]]
        other["subscriptionGroups"] = []
        other["couponCampaigns"] = []
        other["api"] = [
            "tokenVariables": ["ENTITLE_OTHER_TOKEN"], "validation": ["format": "json"],
            "appKeys": [["id": "other-app", "variable": "ENTITLE_OTHER_APP_KEY"]],
        ]
        var limited = other
        limited["id"] = "limited"
        // An app belongs to one publisher.
        limited["apps"] = [["bundleId": "com.example.limited", "environments": ["Sandbox"]]]
        limited["api"] = ["tokenVariables": ["ENTITLE_LIMITED_TOKEN"], "rateLimit": ["perSecond": 0.2, "burst": 2]]
        var keep = try #require(DemoCatalogs.renamed(demo, to: DemoCatalogs.bundleId("keep")) as? [String: Any])
        keep["id"] = "keep"
        keep["transferPolicy"] = "keep"
        keep["apps"] = [DemoCatalogs.app("keep")]
        keep["api"] = ["tokenVariables": ["ENTITLE_KEEP_TOKEN"], "rateLimit": ["perSecond": 10_000, "burst": 10_000]]
        var share = try #require(DemoCatalogs.renamed(demo, to: DemoCatalogs.bundleId("share")) as? [String: Any])
        share["id"] = "share"
        share["transferPolicy"] = "share"
        share["apps"] = [DemoCatalogs.app("share")]
        share["api"] = ["tokenVariables": ["ENTITLE_SHARE_TOKEN"], "rateLimit": ["perSecond": 10_000, "burst": 10_000]]
        var softphone = publishers[1]
        softphone["api"] = [
            "tokenVariables": ["ENTITLE_SOFTPHONE_API_TOKEN"], "rateLimit": ["perSecond": 10_000, "burst": 10_000],
            "appKeys": [["id": "softphone-app", "variable": "ENTITLE_SOFTPHONE_APP_KEY"]], "validation": ["waitSeconds": 15],
        ]
        publishers = [demo, other, limited, softphone, keep, share]
        change(&publishers)
        document["publishers"] = publishers
        let path = FileManager.default.temporaryDirectory.appending(path: "api-catalog-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: path))
        return path
    }

    // MARK: HTTP

    struct Reply: Sendable {
        var status: Int
        var headers: [String: String]
        var text: String
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:] }
        var message: String { json["message"] as? String ?? "" }
    }

    /// One request. With `route` (`"GET /v1/jobs/{id}"`), the answer is checked against the
    /// OpenAPI document: the status must be documented and a JSON body must fit its schema.
    @discardableResult
    func call(
        _ method: HTTPMethod, _ path: String, token: String? = demoToken, headers: [String: String] = [:], json: Any? = nil,
        body: String? = nil, route: String? = nil, timeout: Duration = .seconds(60)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: url + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json)))
        } else if let body {
            request.body = .bytes(ByteBuffer(string: body))
        }
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(timeout.components.seconds))
        let bytes = try await response.body.collect(upTo: 1 << 24)
        var fields: [String: String] = [:]
        for header in response.headers { fields[header.name.lowercased()] = header.value }
        let reply = Reply(status: Int(response.status.code), headers: fields, text: String(buffer: bytes))
        if let route { try OpenAPIDocument.shared.check(reply, route: route) }
        return reply
    }

    // MARK: The App Store and the queue

    /// Buys at the simulator as an app would: `{signedTransaction, appReceipt, transactionId, ...}`.
    /// Jobs ever enqueued on the default queue (all types): "nothing queued" checks read it.
    func enqueuedCount() async throws -> Int {
        try await jobQueue.stats(queue: "default").total("enqueued")
    }

    /// Every key this stack wrote (its prefix), with a fingerprint of its content: "nothing
    /// written" checks compare two of these. (Not `MEMORY USAGE`: a hash's size changes when
    /// Redis finishes growing its table, which a mere read can do.) Consumers' heartbeats
    /// (which a running worker rewrites every second) and the report folder's leases are left out.
    func keys() async throws -> [String: Int] {
        var found: [String: Int] = [:]
        var cursor = "0"
        repeat {
            let reply = try await jobQueue.redis.send(["SCAN", cursor, "MATCH", jobQueue.configuration.prefix + ":*", "COUNT", "1000"])
            let parts = reply.array ?? []
            cursor = parts.first?.string ?? "0"
            // Leases a running folder of the reports renews are no one's writing either.
            for key in (parts.last?.array ?? []).compactMap(\.string) where !key.hasSuffix(":consumers") && !key.contains(":lease:") {
                found[key] = try await fingerprint(key)
            }
        } while cursor != "0"
        return found
    }

    /// The key's content, read by its type in a canonical order, hashed.
    func fingerprint(_ key: String) async throws -> Int {
        let redis = jobQueue.redis
        let type = try await redis.send(["TYPE", key]).string ?? "none"
        let content: [String]
        switch type {
        case "string": content = [try await redis.send(["GET", key]).string ?? ""]
        case "hash":
            // A long-poll (`GET /v1/jobs/{id}?wait=`) marks the job it waits for: a read's mark, not a write of the input.
            content = (try await redis.send(["HGETALL", key]).array ?? []).compactMap(\.string).pairs().filter { $0 != "waiter=1" }.sorted()
        case "set": content = (try await redis.send(["SMEMBERS", key]).array ?? []).compactMap(\.string).sorted()
        case "list": content = (try await redis.send(["LRANGE", key, "0", "-1"]).array ?? []).compactMap(\.string)
        case "zset": content = (try await redis.send(["ZRANGE", key, "0", "-1", "WITHSCORES"]).array ?? []).compactMap(\.string)
        case "stream":
            let last = try await redis.send(["XREVRANGE", key, "+", "-", "COUNT", "1"]).array?.first?.array?.first?.string ?? ""
            content = [String(try await redis.send(["XLEN", key]).int ?? 0), last]
        default: content = []
        }
        var hasher = Hasher()
        hasher.combine(type)
        hasher.combine(content)
        return hasher.finalize()
    }
}

extension Array where Element == String {
    /// `[k1, v1, k2, v2]` as `["k1=v1", "k2=v2"]`.
    func pairs() -> [String] { stride(from: 0, to: count - 1, by: 2).map { self[$0] + "=" + self[$0 + 1] } }
}

/// A customer token as a publisher's backend mints it (HS256 with the demo's secret), or
/// with the claims and key a test wants to try.
func customerToken(
    _ customer: String, audience: String = "demo", lifetime: TimeInterval = 600, issuedAgo: TimeInterval = 0,
    secret: String = APIStack.customerTokenSecret, kid: String? = "k1", algorithm: String = "HS256",
    extraHeader: [String: Any] = [:]
) -> String {
    func base64url(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    var header: [String: Any] = ["alg": algorithm, "typ": "JWT"]
    if let kid { header["kid"] = kid }
    header.merge(extraHeader) { _, extra in extra }
    let issued = Date().timeIntervalSince1970 - issuedAgo
    let claims: [String: Any] = ["sub": customer, "aud": audience, "iat": Int(issued), "exp": Int(issued + lifetime)]
    let input =
        base64url(try! JSONSerialization.data(withJSONObject: header, options: .sortedKeys)) + "."
        + base64url(try! JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
    let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret.utf8)))
    return input + "." + base64url(mac)
}

/// Posts notification bodies to the API's notification route of each publisher it names,
/// and counts what it has handed on.
actor Forwarder {
    let publishers: [String]
    private var apiURL: String?
    private(set) var inFlight = 0

    init(publishers: [String]) { self.publishers = publishers }

    func start(apiURL: String) { self.apiURL = apiURL }

    func forward(_ body: [UInt8]) async throws {
        guard let apiURL, !publishers.isEmpty else { return }
        inFlight += 1
        defer { inFlight -= 1 }
        for publisher in publishers {
            var request = HTTPClientRequest(url: apiURL + "/v1/notifications/apple/" + publisher)
            request.method = .POST
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            // Forward only to publishers with the simulator's app: another publisher's URL refuses it.
            try #require(response.status == .ok, "the notification route of \(publisher) answered \(response.status)")
        }
    }
}

/// A signed transaction with its signature bytes changed: well-formed, forged.
func forged(_ jws: String) -> String {
    var parts = jws.split(separator: ".").map(String.init)
    var signature = Array(parts[2])
    signature[10] = signature[10] == "A" ? "B" : "A"
    parts[2] = String(signature)
    return parts.joined(separator: ".")
}
