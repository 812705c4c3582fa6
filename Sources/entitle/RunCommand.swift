import AppStoreSimulator
import ArgumentParser
import AsyncHTTPClient
import EntitleCore
import Foundation
import HTTPAPI
import JobQueue
import LocalProcesses
import Logging
import Metrics
import NIOCore
import Prometheus
import RedisClient
import ServiceLifecycle

/// `entitle run`: the whole of Entitle on one machine with nothing configured: a private
/// redis-server (unless `ENTITLE_REDIS_URL` is set), the App Store simulator, the API and
/// a worker (`ENTITLE_ENV=development`, the demo catalog). It makes one purchase through
/// the API, prints the job's result and the customer's entitlements, and serves until Ctrl-C.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Start Redis (private unless $ENTITLE_REDIS_URL is set), the simulator, the API and a worker; make a demo purchase.",
        discussion: """
            The demo publisher's token and Basic credentials, the Cloud Softphone-style publisher's token and the \
            operators' token are made up for the run unless ENTITLE_DEMO_API_TOKEN, ENTITLE_DEMO_CLEENG_BASIC, \
            ENTITLE_SOFTPHONE_API_TOKEN and ENTITLE_ADMIN_TOKEN are set. With --json, one line {"api", "simulator", \
            "dashboard", "publisher", "publisherToken", "basicAuth", "softphoneToken", "appKey", "customerTokenSecret", \
            "softphoneAppKey"} is printed once everything is \
            ready, and nothing else.
            """
    )

    @OptionGroup var options: RedisOptions

    @Option(help: "The API's port (0 picks a free one).")
    var port: Int = 8080

    @Option(help: "The simulator's port (0 picks a free one).")
    var simulatorPort: Int = 8081

    @Option(help: "Worker concurrency.")
    var concurrency: Int = 16

    @Flag(help: "Exit after the demo purchase instead of serving until Ctrl-C.")
    var once = false

    @Flag(help: "Print one JSON line with the URLs and credentials once ready, instead of the demo.")
    var json = false

    func validate() throws {
        guard (0...65535).contains(port), (0...65535).contains(simulatorPort) else { throw ValidationError("ports must be 0-65535") }
        guard (1...10_000).contains(concurrency) else { throw ValidationError("--concurrency must be 1-10000") }
    }

    func run() async throws {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        var logger = options.makeLogger("entitle.run")
        if options.logLevel == nil && ProcessInfo.processInfo.environment["ENTITLE_LOG_LEVEL"] == nil { logger.logLevel = .warning }
        var privateRedis: LocalRedisServer?
        var redisURL = options.redisURL
        if options.redis == nil && RedisOptions.environmentURL == nil {
            let server = try await LocalRedisServer(appendOnly: true, logger: logger)
            privateRedis = server
            redisURL = server.url
            if !json { say("started a private redis-server at \(server.url) (AOF on, data in \(server.directory.path))") }
        }
        do {
            try await serve(redisURL: redisURL, registry: registry, logger: logger)
        } catch {
            await privateRedis?.stop()
            throw error
        }
        await privateRedis?.stop()
    }

    private func serve(redisURL: String, registry: PrometheusCollectorRegistry, logger: Logger) async throws {
        // Chosen now: the simulator must know the API's URL before it starts.
        let apiPort = port == 0 ? try LocalRedisServer.freePort() : port
        let apiURL = "http://127.0.0.1:\(apiPort)"
        let notifications = apiURL + "/v1/notifications/apple/demo"

        // The simulator first: the configuration reads its roots and clock.
        guard let simulatorCatalog = ConfigFiles.find("simulator-catalog.json"),
            let catalogPath = ConfigFiles.find("catalog.development.json")
        else {
            throw CommandFailure(
                "entitle run: Config/simulator-catalog.json and Config/catalog.development.json not found (set ENTITLE_CONFIG_DIR)")
        }
        var simulatorConfiguration = SimulatorServer.Configuration(catalog: try SimulatorCatalog(contentsOf: simulatorCatalog))
        simulatorConfiguration.host = "127.0.0.1"
        simulatorConfiguration.port = simulatorPort
        // Version 2 only: Apple sends one version to a URL (App Store Connect picks it), and a
        // V1 copy of each notification would race its V2 (V1 carries no price).
        simulatorConfiguration.notifications = .init(url: notifications)
        let (simulatorPorts, simulatorListening) = AsyncStream<Int>.makeStream()
        var simulatorLogger = logger
        simulatorLogger.logLevel = .critical
        let simulator = try SimulatorServer(configuration: simulatorConfiguration, logger: simulatorLogger) { port in
            simulatorListening.yield(port)
        }
        let simulatorGroup = ServiceGroup(configuration: .init(services: [.init(service: simulator)], logger: logger))

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await simulatorGroup.run() }
            try await self.runStack(
                &tasks, simulatorPorts: simulatorPorts, simulatorGroup: simulatorGroup, catalogPath: catalogPath.path,
                apiURL: apiURL, apiPort: apiPort, redisURL: redisURL, registry: registry, logger: logger)
            try await tasks.waitForAll()
        }
    }

    /// Once the simulator listens: configuration, API and worker, then the demo or the JSON line.
    private func runStack(
        _ tasks: inout ThrowingTaskGroup<Void, any Error>, simulatorPorts: AsyncStream<Int>, simulatorGroup: ServiceGroup,
        catalogPath: String, apiURL: String, apiPort: Int, redisURL: String, registry: PrometheusCollectorRegistry, logger: Logger
    ) async throws {
        var ports = simulatorPorts.makeAsyncIterator()
        guard let listening = await ports.next() else { throw CommandFailure("entitle run: the simulator did not start") }
        let simulatorURL = "http://127.0.0.1:\(listening)"

        var environment = ProcessInfo.processInfo.environment
        environment["ENTITLE_ENV"] = "development"
        environment["ENTITLE_SIMULATOR_URL"] = simulatorURL
        for (variable, value) in [
            ("ENTITLE_DEMO_API_TOKEN", "demo-" + Self.secret()),
            ("ENTITLE_DEMO_CLEENG_BASIC", "demo:" + Self.secret()), ("ENTITLE_ADMIN_TOKEN", "admin-" + Self.secret()),
            ("ENTITLE_SOFTPHONE_API_TOKEN", "softphone-" + Self.secret()), ("ENTITLE_DEMO_APP_KEY", "app-demo-" + Self.secret()),
            ("ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET", Self.secret()), ("ENTITLE_SOFTPHONE_APP_KEY", "app-softphone-" + Self.secret()),
        ] where (environment[variable] ?? "").isEmpty {
            environment[variable] = value
        }
        let settings: EntitleConfiguration
        do {
            settings = try await EntitleConfiguration.load(catalogPath: catalogPath, environment: environment, logger: logger)
        } catch let error as WorkerError {
            throw CommandFailure("entitle run: \(error.message)")
        }
        let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: redisURL), maximumConnections: 16, logger: logger)
        let jobQueue = JobQueue(redis: pool, configuration: try options.jobQueueConfiguration(), logger: logger)

        var handlers = JobHandlerRegistry.builtIn()
        let entitlementServices = WorkerCommand.addEntitlementJobs(
            to: &handlers, settings: settings, jobQueue: jobQueue, queue: "default", reconcile: true, logger: logger)
        let worker = WorkerService(
            configuration: .init(concurrency: ["default": concurrency]), jobQueue: jobQueue, registry: handlers, logger: logger)
        let (apiReady, apiListening) = AsyncStream<String>.makeStream()
        let api = try APICommand.services(
            settings: settings, jobQueue: jobQueue, configuration: EntitleAPI.Configuration(), registry: registry,
            host: "127.0.0.1", port: apiPort, logger: logger
        ) { url in apiListening.yield(url) }
        let reload = SecretsReloadService([("webhook secrets and APNs keys", { try settings.reloadSecrets() })], logger: logger)
        let history = QueueHistoryRecorder(jobQueue: jobQueue, logger: logger)
        let tracing = try TracingBootstrap.start(role: "", environment: environment, logger: logger)
        let services: [any Service] = [tracing].compactMap { $0 } + [worker] + entitlementServices + [reload, history] + api
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services.map {
                    ServiceGroupConfiguration.ServiceConfiguration(service: $0, successTerminationBehavior: .gracefullyShutdownGroup)
                },
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        tasks.addTask {
            defer { pool.close() }
            do {
                try await group.run()
            } catch {
                await simulatorGroup.triggerGracefulShutdown()
                throw error
            }
            await simulatorGroup.triggerGracefulShutdown()
        }
        var ready = apiReady.makeAsyncIterator()
        _ = await ready.next()

        let token = environment["ENTITLE_DEMO_API_TOKEN"] ?? ""
        let basic = "Basic " + Data((environment["ENTITLE_DEMO_CLEENG_BASIC"] ?? "").utf8).base64EncodedString()
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let adminToken = environment["ENTITLE_ADMIN_TOKEN"] ?? ""
        // The simulator's purchases are Sandbox unless asked otherwise: the reports open on the sandbox's figures.
        let dashboard =
            apiURL + "/dashboard#token=" + (adminToken.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")
            + "&environment=sandbox"
        if json {
            say(
                try JSONOutput.line([
                    "api": apiURL, "simulator": simulatorURL, "dashboard": dashboard, "publisher": "demo", "publisherToken": token,
                    "basicAuth": basic, "softphoneToken": environment["ENTITLE_SOFTPHONE_API_TOKEN"] ?? "",
                    "appKey": environment["ENTITLE_DEMO_APP_KEY"] ?? "",
                    "customerTokenSecret": environment["ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET"] ?? "",
                    "softphoneAppKey": environment["ENTITLE_SOFTPHONE_APP_KEY"] ?? "",
                ]))
        } else {
            do {
                try await Self.demoPurchase(api: apiURL, simulator: simulatorURL, token: token)
            } catch {
                say("the demo purchase failed: \(error)")
                await group.triggerGracefulShutdown()
                throw error
            }
            say(
                """

                API:        \(apiURL)   (Authorization: Bearer \(token); Cloud Softphone-style: \
                \(environment["ENTITLE_SOFTPHONE_API_TOKEN"] ?? ""))
                dashboard:  \(dashboard)
                simulator:  \(simulatorURL)
                try:
                  curl -s -H 'Authorization: Bearer \(token)' '\(apiURL)/v1/customers/demo%40example.com/entitlements'
                  curl -s -X POST \(simulatorURL)/simulator/purchases -d '{"bundleId":"com.entitle.demo","productId":"com.entitle.demo.credits.100"}'
                Apple asking about a refund request (CONSUMPTION_REQUEST), which the worker answers:
                  curl -s -X POST \(simulatorURL)/simulator/transactions/TRANSACTION_ID/consumption-request -d '{}'
                  curl -s \(simulatorURL)/simulator/transactions/TRANSACTION_ID    # "consumption": what Apple received
                """)
            if !once { say("serving until Ctrl-C") }
        }
        if once { await group.triggerGracefulShutdown() }
    }

    /// Buys the demo's premium subscription at the simulator, hands the signed transaction to
    /// the API as an app would, and prints what came back.
    static func demoPurchase(api: String, simulator: String, token: String) async throws {
        let purchase = try await call(
            simulator + "/simulator/purchases", body: ["bundleId": "com.entitle.demo", "productId": "com.entitle.demo.premium.monthly"])
        guard let signed = purchase["signedTransaction"] as? String else { throw CommandFailure("the simulator sold nothing") }
        say("bought com.entitle.demo.premium.monthly at the simulator (transaction \(purchase["transactionId"] ?? "?"))")
        let submitted = try await call(
            api + "/v1/purchases", body: ["customer": "demo@example.com", "signedTransaction": signed, "offerId": "premium"], token: token)
        guard let jobId = submitted["jobId"] as? String else { throw CommandFailure("the API returned no job id: \(submitted)") }
        say("POST /v1/purchases -> 202, job \(jobId)")
        let job = try await call(api + "/v1/jobs/\(jobId)?wait=20", token: token)
        say("GET /v1/jobs/\(jobId)?wait=20 -> \(job["status"] ?? "?"): \(try JSONOutput.line(job["result"] ?? NSNull()))")
        let customer = try await call(api + "/v1/customers/demo%40example.com/entitlements", token: token)
        say("GET /v1/customers/demo@example.com/entitlements -> \(try JSONOutput.line(customer["entitlements"] ?? []))")
        try await demoPush(api: api, simulator: simulator, token: token)
    }

    /// Registers a device for the demo customer and pushes new content to everyone entitled
    /// to `premium`; the local APNs says what it received.
    static func demoPush(api: String, simulator: String, token: String) async throws {
        let device = String(repeating: "d3", count: 32)
        _ = try await call(
            api + "/v1/customers/demo%40example.com/devices", body: ["token": device, "bundleId": "com.entitle.demo", "promotional": true],
            token: token)
        say("POST /v1/customers/demo@example.com/devices -> 201, device \(device.prefix(8))…")
        let pushed = try await call(
            api + "/v1/pushes",
            body: [
                "bundleId": "com.entitle.demo", "audience": ["entitlement": "premium"],
                "payload": ["aps": ["alert": ["title": "New issue", "body": "December is out"]], "issue": "2026-12"],
            ], token: token)
        guard let pushId = pushed["pushId"] as? String else { throw CommandFailure("the API returned no push id: \(pushed)") }
        say("POST /v1/pushes (audience: entitlement premium) -> 202, push \(pushId)")
        var push: [String: Any] = [:]
        for _ in 0..<100 {
            push = try await call(api + "/v1/pushes/\(pushId)", token: token)
            if ["finished", "failed"].contains(push["status"] as? String ?? "") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        say("GET /v1/pushes/\(pushId) -> \(push["status"] ?? "?"): \(try JSONOutput.line(push["counts"] ?? [:]))")
        var request = HTTPClientRequest(url: simulator + "/simulator/apns/pushes")
        request.method = .GET
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let received =
            (try? JSONSerialization.jsonObject(with: Data(try await response.body.collect(upTo: 1 << 22).readableBytesView))) as? [Any]
        say("the local APNs received \(received?.count ?? 0) push(es) (GET \(simulator)/simulator/apns/pushes)")
    }

    static func call(_ url: String, body: [String: Any]? = nil, token: String? = nil) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: url)
        if let body {
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        }
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 1 << 22)
        let object = (try? JSONSerialization.jsonObject(with: Data(bytes.readableBytesView)) as? [String: Any]) ?? [:]
        guard (200..<300).contains(response.status.code) else {
            throw CommandFailure("\(url) answered \(response.status.code): \(object["message"] ?? "")")
        }
        return object
    }

    static func secret() -> String {
        (0..<20).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

}

/// Writes a line to standard output at once (unbuffered), so progress reaches a pipe or
/// file as it happens, not when the demo exits.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
