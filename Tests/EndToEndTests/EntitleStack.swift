import AsyncHTTPClient
import EntitleCore
import Entitlements
import Foundation
import HTTPTestSupport
import HTTPTypes
import Hummingbird
import JobQueue
import LocalProcesses
import NIOCore
import RedisClient
import RedisTestSupport
import Testing

/// A whole Entitle on loopback, with real processes: redis-server, `entitle simulator`,
/// `entitle worker` (ENTITLE_ENV=development), and a receiver standing in for the API: it
/// enqueues the simulator's notifications as `notification` jobs, as the API will, and
/// records webhook deliveries.
final class EntitleStack: Sendable {
    static let webhookSecret = "whsec-test-0123456789"

    let prefix: String
    let redisURL: String
    let jobQueue: JobQueue
    let store: EntitlementStore
    let simulatorURL: String
    let receiverURL: String
    let simulator: ChildProcess
    let catalogPath: String
    let receiver: Receiver
    private let workers = Workers()

    /// What the receiver got: notification job ids (with V1 types), webhook deliveries.
    actor Receiver {
        var jobs: [(id: String, v1Type: String?)] = []
        let webhooks = RequestLog()
        var acceptV2 = true
        var acceptV1 = true
        /// Each webhook delivery's signature header with the body it signs.
        var webhookSignatures: [(signature: String, body: [UInt8])] = []

        /// Notifications admitted but not yet enqueued.
        var inFlight = 0

        /// Whether to enqueue a notification that just came; admitted ones are counted until `add`.
        func admit(v1: Bool) -> Bool {
            guard v1 ? acceptV1 : acceptV2 else { return false }
            inFlight += 1
            return true
        }

        func add(_ id: String, v1Type: String?) {
            jobs.append((id, v1Type))
            inFlight -= 1
        }
        func set(v2: Bool, v1: Bool) {
            acceptV2 = v2
            acceptV1 = v1
        }
        func signature(_ value: String, body: [UInt8]) { webhookSignatures.append((value, body)) }
    }

    actor Workers {
        var processes: [ChildProcess] = []
        func add(_ process: ChildProcess) { processes.append(process) }
        func all() -> [ChildProcess] { processes }
    }

    /// Runs `body` with a stack; everything is stopped afterwards.
    /// - Parameter redisURL: another Redis than the tests' (a cluster, Sentinel).
    static func run(_ name: String, redisURL: String? = nil, _ body: @Sendable (EntitleStack) async throws -> Void) async throws {
        let receiver = Receiver()
        let prefix = TestRedis.uniquePrefix(name)
        let url: String
        if let redisURL { url = redisURL } else { url = try await TestRedis.url() }
        var configuration = try RedisConfiguration(url: url)
        configuration.reconnectTimeout = .seconds(30)
        let pool = RedisConnectionPool(configuration: configuration, maximumConnections: 4, logger: TestRedis.logger)
        let jobQueue = JobQueue(redis: pool, configuration: JobQueueConfiguration(prefix: prefix), logger: TestRedis.logger)
        let router = Router()
        router.post("v2") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 1 << 20)
            guard await receiver.admit(v1: false) else { return Response.json("{}") }
            let object = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]
            let signed = object?["signedPayload"] as? String ?? ""
            let payload = try JSONSerialization.data(withJSONObject: ["publisher": "demo", "signedPayload": signed])
            let id = try await jobQueue.enqueue(EnqueueRequest(type: "notification", payload: String(decoding: payload, as: UTF8.self))).id
            await receiver.add(id, v1Type: nil)
            return Response.json("{}")
        }
        router.post("v1") { request, _ -> Response in
            let body = String(buffer: try await request.body.collect(upTo: 1 << 20))
            guard await receiver.admit(v1: true) else { return Response.json("{}") }
            let type = (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["notification_type"] as? String
            let payload = try JSONSerialization.data(withJSONObject: ["publisher": "demo", "v1": body])
            let id = try await jobQueue.enqueue(EnqueueRequest(type: "notification", payload: String(decoding: payload, as: UTF8.self))).id
            await receiver.add(id, v1Type: type)
            return Response.json("{}")
        }
        router.post("webhook") { request, _ -> Response in
            let name = try #require(HTTPField.Name("X-Entitle-Signature"))
            let signature = request.headers[name] ?? ""
            let entry = try await receiver.webhooks.record(request)
            await receiver.signature(signature, body: entry.body)
            return Response.json("{}")
        }
        try await LoopbackServer.run(router) { receiverURL in
            let catalog = try Self.writeCatalog(webhookURL: receiverURL + "/webhook")
            let simulatorCatalog = try Self.writeSimulatorCatalog()
            defer {
                try? FileManager.default.removeItem(atPath: catalog)
                try? FileManager.default.removeItem(atPath: simulatorCatalog)
            }
            let simulator = try ChildProcess(
                ChildProcess.entitleExecutable,
                [
                    "simulator", "--port", "0", "--catalog", simulatorCatalog, "--notify-url", receiverURL + "/v2", "--notify-url-v1",
                    receiverURL + "/v1", "--log-level", "error",
                ])
            defer { if simulator.isRunning { simulator.signal(SIGKILL) } }
            try await eventually("the simulator to listen") { simulator.output.contains("simulator listening on ") }
            let simulatorURL = try #require(
                simulator.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
            let stack = EntitleStack(
                prefix: prefix, redisURL: url, jobQueue: jobQueue, simulatorURL: simulatorURL,
                receiverURL: receiverURL,
                simulator: simulator, catalogPath: catalog, receiver: receiver)
            do {
                try await body(stack)
            } catch {
                await stack.stop()
                throw error
            }
            await stack.stop()
        }
        pool.close()
    }

    private init(
        prefix: String, redisURL: String, jobQueue: JobQueue, simulatorURL: String, receiverURL: String, simulator: ChildProcess,
        catalogPath: String, receiver: Receiver
    ) {
        self.prefix = prefix
        self.redisURL = redisURL
        self.jobQueue = jobQueue
        self.store = EntitlementStore(redis: jobQueue.redis, prefix: prefix, logger: TestRedis.logger)
        self.simulatorURL = simulatorURL
        self.receiverURL = receiverURL
        self.simulator = simulator
        self.catalogPath = catalogPath
        self.receiver = receiver
    }

    static let root = DemoCatalogs.root

    /// The app each test publisher sells through (see `DemoCatalogs`).
    static func bundleId(_ publisher: String) -> String { DemoCatalogs.bundleId(publisher) }

    /// The demo simulator catalog, plus the apps `com.entitle.keep` and `com.entitle.share`.
    static func writeSimulatorCatalog() throws -> String { try DemoCatalogs.writeSimulatorCatalog() }

    /// The development catalog, plus publishers `keep` and `share` (the other transfer
    /// policies, each with its own app selling the demo's products), `other` (another app),
    /// and a webhook on `demo`.
    static func writeCatalog(webhookURL: String) throws -> String {
        let source = root.appending(path: "Config/catalog.development.json")
        var document = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: source)) as? [String: Any])
        var publishers = try #require(document["publishers"] as? [[String: Any]])
        var demo = publishers[0]
        demo["webhook"] = ["url": webhookURL, "secretVariable": "ENTITLE_TEST_WEBHOOK_SECRET"]
        func copy(_ id: String, policy: String) throws -> [String: Any] {
            var publisher = try #require(DemoCatalogs.renamed(publishers[0], to: bundleId(id)) as? [String: Any])
            publisher["id"] = id
            publisher["transferPolicy"] = policy
            publisher["api"] = nil
            publisher["apps"] = [DemoCatalogs.app(id)]
            return publisher
        }
        var keep = try copy("keep", policy: "keep")
        keep["offers"] = (keep["offers"] as? [[String: Any]] ?? []).filter { $0["offerId"] as? String != "credits-100" }
        let share = try copy("share", policy: "share")
        var other = publishers[0]
        other["id"] = "other"
        other["apps"] = [["bundleId": "com.example.other", "environments": ["Sandbox"]]]
        other["subscriptionGroups"] = []
        other["couponCampaigns"] = []
        // Its own secret key as the demo's, but none of the demo app's keys: those name the demo's app.
        if var api = other["api"] as? [String: Any] {
            api["appKeys"] = nil
            api["customerTokens"] = nil
            other["api"] = api
        }
        publishers = [demo, keep, share, other]
        document["publishers"] = publishers
        let path = FileManager.default.temporaryDirectory.appending(path: "e2e-catalog-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: path))
        return path
    }

    // MARK: Processes

    @discardableResult
    func startWorker(environment extra: [String: String] = [:]) async throws -> ChildProcess {
        var environment = [
            "ENTITLE_ENV": "development", "ENTITLE_SIMULATOR_URL": simulatorURL, "ENTITLE_CATALOG": catalogPath,
            "ENTITLE_TEST_WEBHOOK_SECRET": Self.webhookSecret,
        ]
        environment.merge(extra) { $1 }
        let process = try ChildProcess(
            ChildProcess.entitleExecutable,
            ["worker", "--redis", redisURL, "--prefix", prefix, "--queues", "default=8", "--heartbeat-ttl", "1", "--log-level", "warning"],
            environment: environment)
        await workers.add(process)
        // Ready once its consumer registered.
        let consumers = "\(prefix):{default}:consumers"
        try await eventually("worker \(process.pid) to register") {
            if !process.isRunning { throw SpawnError(message: "the worker exited: \(process.errors)") }
            let members = try await jobQueue.redis.send(["ZRANGE", consumers, "0", "-1"]).array?.compactMap(\.string) ?? []
            return members.contains { $0.contains(":\(process.pid):") }
        }
        return process
    }

    func stop() async {
        for process in await workers.all() where process.isRunning {
            process.signal(SIGTERM)
            _ = try? await process.wait(timeout: .seconds(30))
        }
        simulator.signal(SIGTERM)
        _ = try? await simulator.wait(timeout: .seconds(30))
    }

    // MARK: The simulator

    func simulatorCall(_ path: String, _ json: String? = nil) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: simulatorURL + path)
        if let json {
            request.method = .POST
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 22)
        try #require((200..<300).contains(Int(response.status.code)), "\(path) answered \(response.status): \(String(buffer: body))")
        return (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]) ?? [:]
    }

    /// Buys at the simulator through the app of `publisher` (see `bundleId`).
    func purchase(_ product: String, _ extra: String = "", publisher: String = "demo") async throws -> [String: Any] {
        let bundle = Self.bundleId(publisher)
        return try await simulatorCall(
            "/simulator/purchases",
            #"{"bundleId":"\#(bundle)","productId":"\#(bundle).\#(product)"\#(extra.isEmpty ? "" : ",")\#(extra)}"#)
    }

    func advance(seconds: Double) async throws { _ = try await simulatorCall("/simulator/clock/advance", #"{"seconds":\#(seconds)}"#) }

    // MARK: Jobs

    func enqueue(_ type: String, _ payload: [String: Any]) async throws -> String {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: payload), as: UTF8.self)
        return try await jobQueue.enqueue(EnqueueRequest(type: type, payload: json)).id
    }

    /// Waits for a job to finish; returns its record with the result parsed.
    func finished(_ id: String, timeout: Duration = .seconds(30)) async throws -> (record: JobRecord, result: [String: Any]) {
        var record: JobRecord?
        try await eventually("job \(id) to finish", timeout: timeout) {
            record = try await jobQueue.job(id: id, queue: "default")
            return record?.status == .succeeded || record?.status == .failed
        }
        let finished = try #require(record)
        let result = finished.result.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } ?? [:]
        return (finished, result)
    }

    /// Enqueues a receipt job and waits for its result.
    func receipt(_ payload: [String: Any]) async throws -> [String: Any] {
        var payload = payload
        if payload["publisher"] == nil { payload["publisher"] = "demo" }
        let (record, result) = try await finished(try await enqueue("receipt", payload))
        try #require(record.status == .succeeded, "receipt job failed: \(record.lastError ?? "")")
        return result
    }

    func customer(_ id: String, publisher: String = "demo") async throws -> CustomerEntitlements {
        try await store.load(publisher: publisher, customer: id).state
    }

    /// Waits until the customer's stored state satisfies `condition`.
    func waitForCustomer(
        _ id: String, publisher: String = "demo", _ what: String, timeout: Duration = .seconds(30),
        _ condition: @Sendable (CustomerEntitlements) -> Bool
    ) async throws {
        try await eventually("\(id): \(what)", timeout: timeout) { condition(try await self.customer(id, publisher: publisher)) }
    }

    /// Every notification job the receiver enqueued so far, finished.
    func notificationJobs() async throws -> [(record: JobRecord, result: [String: Any], v1Type: String?)] {
        try await eventually("admitted notifications to be enqueued") { await receiver.inFlight == 0 }
        var finished: [(JobRecord, [String: Any], String?)] = []
        for (id, type) in await receiver.jobs {
            let (record, result) = try await self.finished(id)
            finished.append((record, result, type))
        }
        return finished
    }
}
