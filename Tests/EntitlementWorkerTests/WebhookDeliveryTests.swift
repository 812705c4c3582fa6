import EntitleCore
import EntitlementJobs
import Foundation
import HTTPTestSupport
import Hummingbird
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// Where webhooks may go: never along a redirect, never to a private address unless the
/// deployment allows it; and how they are signed while a secret is rotated.
@Suite struct WebhookDeliveryTests {
    /// Runs a worker for `catalog`'s webhook at `url`, delivers one event, and returns the job.
    static func deliver(to url: String, environment extra: [String: String] = [:]) async throws -> JobRecord {
        let document: [String: Any] = [
            "publishers": [
                [
                    "id": "acme", "apps": [["bundleId": "com.acme.app", "environments": ["Sandbox"]]],
                    "offers": [["offerId": "gold", "productIds": ["com.acme.gold"], "entitlements": ["gold"]]],
                    "webhook": ["url": url, "secretVariable": "ACME_WEBHOOK_SECRET"],
                ]
            ]
        ]
        let catalog = FileManager.default.temporaryDirectory.appending(path: "webhook-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: catalog))
        defer { try? FileManager.default.removeItem(atPath: catalog) }
        var environment = ["ACME_WEBHOOK_SECRET": "webhook-secret-0123456789"]
        environment.merge(extra) { $1 }
        let settings = try await EntitleConfiguration.load(catalogPath: catalog, environment: environment, logger: TestRedis.logger)
        let jobQueue = JobQueue(
            redis: try await TestRedis.pool(), configuration: JobQueueConfiguration(prefix: TestRedis.uniquePrefix("webhook")),
            logger: TestRedis.logger)
        var registry = JobHandlerRegistry()
        EntitlementJobs.register(
            in: &registry, service: EntitlementService(configuration: settings, jobQueue: jobQueue, logger: TestRedis.logger))
        var queue = QueueConsumer.Settings(concurrency: 2)
        queue.blockTimeout = .milliseconds(200)
        let worker = WorkerService(
            configuration: WorkerService.Configuration(queues: ["default": queue]), jobQueue: jobQueue, registry: registry,
            logger: TestRedis.logger)
        let running = Task { try await worker.run() }
        defer {
            worker.stop()
            running.cancel()
        }
        let event = #"{"id":"e1","type":"purchase"}"#
        let id = try await jobQueue.enqueue(
            EnqueueRequest(
                type: "webhook",
                payload: JobPayloads.encode(JobPayloads.Webhook(publisher: "acme", event: event, eventId: "e1")), maxAttempts: 1)
        ).id
        var record: JobRecord?
        try await eventually("the webhook job to finish") {
            record = try await jobQueue.job(id: id, queue: "default")
            return record?.status.isFinished == true
        }
        return try #require(record)
    }

    @Test func privateAddressesAreRefusedUnlessAllowed() async throws {
        let received = RequestLog()
        let router = Router()
        router.post("hook") { request, _ -> Response in
            try await received.record(request)
            return Response(status: .ok)
        }
        try await LoopbackServer.run(router) { url in
            let port = try #require(URL(string: url)?.port)
            for target in ["\(url)/hook", "http://localhost:\(port)/hook", "http://[::ffff:127.0.0.1]:\(port)/hook"] {
                let job = try await Self.deliver(to: target)
                #expect(
                    job.status == .failed && job.lastError?.contains("webhook.forbiddenAddress") == true,
                    "\(target): \(job.lastError ?? "")")
            }
            #expect(await received.entries.isEmpty, "no request reached the private address")
            // A deployment that allows it (development does) delivers there.
            let allowed = try await Self.deliver(to: "\(url)/hook", environment: ["ENTITLE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "1"])
            #expect(allowed.status == .succeeded)
            #expect(await received.entries.count == 1)
        }
    }

    @Test func redirectsAreNeverFollowed() async throws {
        let target = RequestLog()
        let router = Router()
        router.post("target") { request, _ -> Response in
            try await target.record(request)
            return Response(status: .ok)
        }
        router.post("hook") { request, _ -> Response in
            let port = request.head.authority?.split(separator: ":").last.map(String.init) ?? ""
            return Response(status: .found, headers: [.location: "http://127.0.0.1:\(port)/target"])
        }
        try await LoopbackServer.run(router) { url in
            let job = try await Self.deliver(to: "\(url)/hook", environment: ["ENTITLE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "1"])
            #expect(job.status == .failed && job.lastError?.contains("webhook.status302") == true, "\(job.lastError ?? "")")
            #expect(await target.entries.isEmpty, "the redirect's target got nothing")
        }
    }

    @Test func publicAddressesAreToldFromPrivateOnes() {
        func v4(_ text: String) -> [UInt8] { text.split(separator: ".").compactMap { UInt8($0) } }
        let refused = [
            "127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
            "224.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.1",
        ]
        for address in refused { #expect(!WebhookDestination.isPublic(v4(address)), "\(address)") }
        for address in ["8.8.8.8", "17.253.144.10", "172.32.0.1", "100.128.0.1", "1.1.1.1"] {
            #expect(WebhookDestination.isPublic(v4(address)), "\(address)")
        }
        for (text, expected) in [
            ("::1", false), ("::", false), ("fe80::1", false), ("fd00:ec2::254", false), ("fc00::1", false), ("ff02::1", false),
            ("::ffff:127.0.0.1", false), ("::ffff:8.8.8.8", true), ("64:ff9b::a9fe:a9fe", false), ("2001:db8::1", false),
            ("2606:4700:4700::1111", true),
        ] {
            let bytes = WebhookDestination.literal(text)
            #expect(bytes.map(WebhookDestination.isPublic) == expected, "\(text)")
        }
    }

    @Test func aRotationSignsWithBothSecretsAndIsReadAgainOnReload() async throws {
        let file = FileManager.default.temporaryDirectory.appending(path: "webhook-secret-\(UUID().uuidString)").path
        try "old-secret-0123456789\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let document: [String: Any] = [
            "publishers": [
                [
                    "id": "acme", "apps": [["bundleId": "com.acme.app", "environments": ["Sandbox"]]],
                    "offers": [["offerId": "gold", "productIds": ["com.acme.gold"], "entitlements": ["gold"]]],
                    "webhook": ["url": "https://hooks.example.com/entitle", "secretVariable": "ACME_WEBHOOK_SECRET"],
                ]
            ]
        ]
        let catalog = FileManager.default.temporaryDirectory.appending(path: "rotation-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: catalog))
        defer { try? FileManager.default.removeItem(atPath: catalog) }
        let settings = try await EntitleConfiguration.load(
            catalogPath: catalog, environment: ["ACME_WEBHOOK_SECRET_FILE": file], logger: TestRedis.logger)
        #expect(settings.webhookSecrets.current["acme"]?.map(\.value) == ["old-secret-0123456789"])
        try "old-secret-0123456789\nnew-secret-0123456789\n".write(toFile: file, atomically: true, encoding: .utf8)
        try settings.reloadSecrets()
        let secrets = try #require(settings.webhookSecrets.current["acme"])
        let header = WebhookJobHandler.signature(body: "{}", secrets: secrets, timestamp: 1_800_000_000)
        #expect(header.hasPrefix("t=1800000000,v1=") && header.components(separatedBy: ",v1=").count == 3, "\(header)")
        // A file that cannot be read keeps the secrets in use.
        try FileManager.default.removeItem(atPath: file)
        #expect(throws: (any Error).self) { try settings.reloadSecrets() }
        #expect(settings.webhookSecrets.current["acme"]?.count == 2)
        // Nothing that prints the configuration shows a secret.
        var dumped = ""
        dump(settings, to: &dumped)
        for shown in [dumped, "\(settings)", String(reflecting: settings)] {
            #expect(!shown.contains("secret-0123456789"))
        }
    }
}
