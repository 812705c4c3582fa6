import AsyncHTTPClient
import EntitleCore
import EntitlementJobs
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// Devices and pushes end to end: the API, a worker, the simulator and its local APNs.
@Suite struct PushTests {
    static let appToken = String(repeating: "a1", count: 32)

    /// A device token of 32 bytes, distinct per `seed`.
    static func token(_ seed: Int) -> String { String(format: "%064x", seed * 7919 + 1) }

    /// Registers a device with the secret key; the reply's JSON.
    @discardableResult
    static func register(
        _ api: APIStack, _ customer: String, token: String, pushType: String = "alert", promotional: Bool = false,
        bundleId: String = "com.entitle.demo", status expected: Int = 201
    ) async throws -> [String: Any] {
        let reply = try await api.call(
            .POST, "/v1/customers/\(APIStack.escape(customer))/devices",
            json: ["token": token, "bundleId": bundleId, "pushType": pushType, "promotional": promotional],
            route: "POST /v1/customers/{id}/devices")
        try #require(reply.status == expected, "\(reply.status): \(reply.text)")
        return reply.json
    }

    /// Buys `product` for `customer` and claims it through the backend; the purchase.
    @discardableResult
    static func subscribe(_ api: APIStack, _ customer: String, _ product: String) async throws -> [String: Any] {
        let bought = try await api.buy(product)
        let claimed = try await api.claim(["customer": customer, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
        try #require(claimed["accessGranted"] as? Bool == true, "\(claimed)")
        return bought
    }

    static func push(_ api: APIStack, _ body: [String: Any]) async throws -> String {
        let reply = try await api.call(.POST, "/v1/pushes", json: body, route: "POST /v1/pushes")
        try #require(reply.status == 202, "\(reply.status): \(reply.text)")
        return try #require(reply.json["pushId"] as? String)
    }

    static func entitlements(_ api: APIStack, _ customer: String) async throws -> [String] {
        try await api.customer(customer)["entitlements"] as? [String] ?? []
    }

    /// The push once it has finished or failed.
    static func outcome(_ api: APIStack, _ id: String) async throws -> [String: Any] {
        var document: [String: Any] = [:]
        try await eventually("push \(id) to finish", timeout: .seconds(60)) {
            let reply = try await api.call(.GET, "/v1/pushes/\(id)?limit=1000", route: "GET /v1/pushes/{id}")
            document = reply.json
            return ["finished", "failed"].contains(document["status"] as? String ?? "")
        }
        return document
    }

    /// What the local APNs accepted: token -> the pushes it got.
    static func received(_ api: APIStack) async throws -> [String: [[String: Any]]] {
        let pushes = try await api.simulatorJSON("/simulator/apns/pushes") as? [[String: Any]] ?? []
        return Dictionary(grouping: pushes) { $0["token"] as? String ?? "" }
    }

    nonisolated(unsafe) static let alert: [String: Any] = [
        "aps": ["alert": ["title": "New issue", "body": "December is out"]], "issue": "2026-12",
    ]

    @Test func aPushReachesExactlyTheEntitledDevicesItIsFor() async throws {
        try await APIStack.run("push-audience", worker: true) { api in
            try await Self.subscribe(api, "ann@example.com", "premium.monthly")
            try await Self.subscribe(api, "bob@example.com", "pass.30days")
            try await Self.subscribe(api, "cyd@example.com", "basic.monthly")
            try await Self.register(api, "ann@example.com", token: Self.token(1), promotional: true)
            try await Self.register(api, "ann@example.com", token: Self.token(2), pushType: "voip")
            try await Self.register(api, "bob@example.com", token: Self.token(3))
            try await Self.register(api, "cyd@example.com", token: Self.token(4), promotional: true)
            try await Self.register(api, "dee@example.com", token: Self.token(5), promotional: true)

            let premium = try await Self.push(
                api, ["bundleId": "com.entitle.demo", "audience": ["entitlement": "premium"], "payload": Self.alert])
            let done = try await Self.outcome(api, premium)
            #expect(done["status"] as? String == "finished")
            #expect(done["audience"] as? Int == 2)
            #expect((done["counts"] as? [String: Int]) == ["sent": 2])
            var got = try await Self.received(api)
            #expect(Set(got.keys) == [Self.token(1), Self.token(3)], "only ann's and bob's alert devices: \(got.keys.sorted())")
            let first = try #require(got[Self.token(1)]?.first)
            #expect(first["topic"] as? String == "com.entitle.demo")
            #expect(first["pushType"] as? String == "alert")
            #expect(first["priority"] as? Int == 10)
            let payload = try JSONSerialization.jsonObject(with: Data((first["payload"] as? String ?? "").utf8)) as? [String: Any]
            #expect(payload?["issue"] as? String == "2026-12")

            // Promotional: only the opted-in devices of the audience (ann's, not bob's, not dee's who holds nothing).
            _ = try await api.simulatorJSON("/simulator/apns/pushes", method: .DELETE)
            let offer = try await Self.push(
                api, ["bundleId": "com.entitle.demo", "audience": ["offerId": "premium"], "payload": Self.alert, "promotional": true])
            #expect(try await Self.outcome(api, offer)["status"] as? String == "finished")
            got = try await Self.received(api)
            #expect(Set(got.keys) == [Self.token(1)])

            // VoIP to one named customer: the VoIP token, on the .voip topic.
            _ = try await api.simulatorJSON("/simulator/apns/pushes", method: .DELETE)
            let voip = try await Self.push(
                api,
                [
                    "bundleId": "com.entitle.demo", "audience": ["customer": "ann@example.com"], "payload": ["call": "42"],
                    "pushType": "voip",
                ])
            #expect(try await Self.outcome(api, voip)["status"] as? String == "finished")
            got = try await Self.received(api)
            #expect(Set(got.keys) == [Self.token(2)])
            #expect(got[Self.token(2)]?.first?["topic"] as? String == "com.entitle.demo.voip")

            // The same idempotency key is the same push; with another body it is refused.
            let body: [String: Any] = [
                "bundleId": "com.entitle.demo", "audience": ["entitlement": "basic"], "payload": Self.alert, "idempotencyKey": "dec-issue",
            ]
            let once = try await Self.push(api, body)
            #expect(try await Self.push(api, body) == once)
            var changed = body
            changed["payload"] = ["aps": ["alert": "other"]]
            #expect(try await api.call(.POST, "/v1/pushes", json: changed, route: "POST /v1/pushes").status == 409)
            #expect(try await Self.outcome(api, once)["counts"] as? [String: Int] == ["sent": 1])
        }
    }

    @Test func aCustomerWhoLapsesAfterThePushIsQueuedGetsNothingAndNoDeviceGetsItTwice() async throws {
        try await APIStack.run("push-lapse", worker: false, notify: ["demo"]) { api in
            let store = EntitlementStore(redis: api.jobQueue.redis, prefix: api.jobQueue.configuration.prefix, logger: TestRedis.logger)
            let service = EntitlementService(configuration: api.settings, jobQueue: api.jobQueue, logger: TestRedis.logger)
            var registry = JobHandlerRegistry.builtIn()
            EntitlementJobs.register(in: &registry, service: service)
            // Once the audience is fixed and before any batch is sent: Apple refunds bob's
            // subscription, and a worker that died while APNs had cyd's push left its mark.
            let gate = Gate()
            registry.register(
                "push-batch",
                JobRegistration(
                    handler: AfterGate(gate: gate, inner: PushBatchJobHandler(service: service)),
                    retryPolicy: RetryPolicy(base: .milliseconds(100), cap: .seconds(1), maxAttempts: 3)))
            let pushId = Box("")
            let bobsTransaction = Box("")
            registry.register(
                "push",
                JobRegistration(
                    handler: AfterFanOut(inner: PushJobHandler(service: service), gate: gate) {
                        try await api.simulator("/simulator/transactions/\(bobsTransaction.value)/refund", "{}")
                        try await eventually("bob's refund to be applied") {
                            try await !Self.entitlements(api, "bob@example.com").contains("premium")
                        }
                        try await store.pushes.setResults(
                            publisher: "demo", id: pushId.value,
                            [.init(token: Self.token(13), customer: "cyd@example.com", result: .inFlight, attempt: "dead-worker:1")])
                    }, retryPolicy: RetryPolicy(base: .milliseconds(100), cap: .seconds(1), maxAttempts: 3)))
            try await Self.withWorker(api, registry) {
                try await Self.subscribe(api, "ann@example.com", "premium.monthly")
                bobsTransaction.value = try #require(
                    try await Self.subscribe(api, "bob@example.com", "premium.monthly")["transactionId"] as? String)
                try await Self.subscribe(api, "cyd@example.com", "premium.monthly")
                try await Self.register(api, "ann@example.com", token: Self.token(11))
                try await Self.register(api, "bob@example.com", token: Self.token(12))
                try await Self.register(api, "cyd@example.com", token: Self.token(13))
                // The id is known before the fan-out runs: it is derived from the idempotency key.
                pushId.value = SHA256Hex.of("push\ndemo\nlapse", bytes: 16)
                let id = try await Self.push(
                    api,
                    [
                        "bundleId": "com.entitle.demo", "audience": ["entitlement": "premium"], "payload": Self.alert,
                        "idempotencyKey": "lapse",
                    ])
                #expect(id == pushId.value)
                let done = try await Self.outcome(api, id)
                #expect(done["audience"] as? Int == 3)
                #expect(done["lapsed"] as? Int == 1)
                #expect(done["counts"] as? [String: Int] == ["sent": 1, "unconfirmed": 1])
                let devices = try #require(done["devices"] as? [[String: Any]])
                #expect(devices.first { $0["token"] as? String == Self.token(13) }?["result"] as? String == "unconfirmed")
                let got = try await Self.received(api)
                #expect(Set(got.keys) == [Self.token(11)], "bob was refunded; cyd's was in doubt: \(got.keys.sorted())")

                // The batch run again (a retry, a second worker): nothing is sent twice.
                let again = JobPayloads.PushBatch(publisher: "demo", pushId: id, batch: 0)
                let rerun = try await api.jobQueue.enqueue(try EnqueueRequest(again, queue: "default"))
                try await eventually("the rerun to finish") {
                    try await api.jobQueue.job(id: rerun.id, queue: "default")?.status == .succeeded
                }
                let after = try await Self.received(api)
                #expect(after.values.map(\.count) == [1], "each device got the push once: \(after.mapValues(\.count))")
            }
        }
    }

    @Test func apnsAnswersRemoveTokensBackOffAndFailThePushAsAppleSays() async throws {
        try await APIStack.run("push-answers", worker: true) { api in
            try await Self.subscribe(api, "ann@example.com", "premium.annual")
            try await Self.subscribe(api, "bob@example.com", "premium.annual")
            let gone = Self.token(21)
            let again = Self.token(22)
            let busy = Self.token(23)
            try await Self.register(api, "ann@example.com", token: gone)
            let registered = try await Self.register(api, "ann@example.com", token: again)
            try await Self.register(api, "bob@example.com", token: busy)
            let registeredAt = try #require(registered["registeredAt"] as? Int64)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            // `gone` was unregistered after it was registered; `again` before its latest registration.
            for fault: [String: Any] in [
                ["token": gone, "status": 410, "reason": "Unregistered", "timestamp": now + 1000],
                ["token": again, "status": 410, "reason": "Unregistered", "timestamp": registeredAt - 60_000],
                ["token": busy, "status": 429, "reason": "TooManyRequests", "count": 2],
            ] {
                _ = try await api.simulator(
                    "/simulator/apns/faults", String(decoding: try JSONSerialization.data(withJSONObject: fault), as: UTF8.self))
            }
            let id = try await Self.push(api, ["bundleId": "com.entitle.demo", "audience": ["entitlement": "hd"], "payload": Self.alert])
            let done = try await Self.outcome(api, id)
            #expect(done["counts"] as? [String: Int] == ["sent": 1, "refused": 2], "\(done)")
            let results = Dictionary(
                uniqueKeysWithValues: (done["devices"] as? [[String: Any]] ?? []).map { ($0["token"] as? String ?? "", $0) })
            #expect(results[gone]?["reason"] as? String == "Unregistered")
            #expect(results[busy]?["result"] as? String == "sent", "429 twice, then delivered")
            let listed = try await api.call(.GET, "/v1/customers/ann%40example.com/devices", route: "GET /v1/customers/{id}/devices")
            let tokens = (listed.json["devices"] as? [[String: Any]] ?? []).compactMap { $0["token"] as? String }
            #expect(tokens == [again], "a 410 removes the token unless it was registered again after Apple's timestamp")

            // APNs refusing the provider token fails the push with Apple's reason, at once.
            _ = try await api.simulator("/simulator/apns/faults", #"{"status":403,"reason":"InvalidProviderToken"}"#)
            let refused = try await Self.push(
                api, ["bundleId": "com.entitle.demo", "audience": ["customer": "bob@example.com"], "payload": Self.alert])
            let failed = try await Self.outcome(api, refused)
            #expect(failed["status"] as? String == "failed")
            #expect((failed["error"] as? String)?.contains("InvalidProviderToken") == true)
            // The batch job's outcome is recorded after the push's (acknowledgements are batched).
            try await eventually("the push batch job recorded dead") {
                try await api.jobQueue.stats(queue: "default").counters["dead:push-batch"] ?? 0 > 0
            }
            let dead = try await api.jobQueue.stats(queue: "default").counters["dead:push-batch"]
            #expect(dead == 1, "refused once, not retried")
        }
    }

    @Test func devicesAreTheirCustomersAloneMoveToTheNewestOwnerAndAreCapped() async throws {
        try await APIStack.run(
            "push-devices",
            catalog: { publishers in
                guard let index = publishers.firstIndex(where: { $0["id"] as? String == "demo" }) else { return }
                publishers[index]["push"] = ["maxDevicesPerCustomer": 3]
            }
        ) { api in
            let ann = customerToken("ann@example.com")
            let path = "/v1/customers/ann%40example.com/devices"
            let body: [String: Any] = ["token": Self.token(31), "bundleId": "com.entitle.demo"]
            // An app key with the customer's token registers and removes that customer's devices only.
            let app = try await api.call(
                .POST, path, token: APIStack.appKey, headers: ["X-Customer-Token": ann], json: body,
                route: "POST /v1/customers/{id}/devices")
            #expect(app.status == 201, "\(app.text)")
            let other = try await api.call(
                .POST, "/v1/customers/bob%40example.com/devices", token: APIStack.appKey, headers: ["X-Customer-Token": ann], json: body,
                route: "POST /v1/customers/{id}/devices")
            #expect(other.status == 403)
            #expect(try await api.call(.GET, path, token: APIStack.appKey, headers: ["X-Customer-Token": ann]).status == 403)
            for bad: [String: Any] in [
                ["token": "xyz", "bundleId": "com.entitle.demo"],
                ["token": String(repeating: "ab", count: 31), "bundleId": "com.entitle.demo"],
                ["token": Self.token(32), "bundleId": "com.other.app"],
                ["token": Self.token(32), "bundleId": "com.entitle.demo", "pushType": "mdm"],
                ["token": Self.token(32), "bundleId": "com.entitle.demo", "environment": "staging"],
            ] {
                let reply = try await api.call(.POST, path, json: bad, route: "POST /v1/customers/{id}/devices")
                #expect(reply.status == 400, "\(bad): \(reply.status) \(reply.text)")
            }
            // The token moves to the newest customer who registers it (a shared iPad).
            try await Self.register(api, "bob@example.com", token: Self.token(31))
            let annDevices = try await api.call(.GET, path, route: "GET /v1/customers/{id}/devices").json["devices"] as? [[String: Any]]
            #expect(annDevices?.isEmpty == true)
            // Past the limit the oldest goes.
            for seed in 40..<44 { try await Self.register(api, "ann@example.com", token: Self.token(seed)) }
            let kept = (try await api.call(.GET, path, route: "GET /v1/customers/{id}/devices").json["devices"] as? [[String: Any]] ?? [])
                .compactMap { $0["token"] as? String }
            #expect(kept == (41..<44).map(Self.token))
            let removed = try await api.call(
                .DELETE, path + "/" + Self.token(41), token: APIStack.appKey, headers: ["X-Customer-Token": ann],
                route: "DELETE /v1/customers/{id}/devices/{token}")
            #expect(removed.status == 204)
            #expect(
                try await api.call(.DELETE, path + "/" + Self.token(41), route: "DELETE /v1/customers/{id}/devices/{token}").status == 404)
            // Pushes that APNs would refuse for everyone are refused before anything is queued.
            let queued = try await api.enqueuedCount()
            for bad: [String: Any] in [
                ["bundleId": "com.entitle.demo", "audience": ["entitlement": "nothing"], "payload": Self.alert],
                [
                    "bundleId": "com.entitle.demo", "audience": ["offerId": "premium"], "payload": ["aps": ["content-available": 1]],
                    "pushType": "background", "priority": 10,
                ],
                [
                    "bundleId": "com.entitle.demo", "audience": ["offerId": "premium"],
                    "payload": ["aps": ["alert": String(repeating: "x", count: 4100)]],
                ],
                [
                    "bundleId": "com.entitle.demo", "audience": ["offerId": "premium"], "payload": Self.alert,
                    "collapseId": String(repeating: "c", count: 65),
                ],
                ["bundleId": "com.entitle.softphone", "audience": ["offerId": "premium"], "payload": Self.alert],
                ["bundleId": "com.entitle.demo", "audience": ["customer": "not-an-email"], "payload": Self.alert],
                [
                    "bundleId": "com.entitle.demo", "audience": ["offerId": "premium", "customer": "ann@example.com"],
                    "payload": Self.alert,
                ],
                ["bundleId": "com.entitle.demo", "audience": ["offerId": "premium"], "payload": "text"],
            ] {
                let reply = try await api.call(.POST, "/v1/pushes", json: bad, route: "POST /v1/pushes")
                #expect(reply.status == 400, "\(bad): \(reply.status) \(reply.text)")
            }
            #expect(try await api.call(.POST, "/v1/pushes", token: APIStack.appKey, json: ["bundleId": "com.entitle.demo"]).status == 403)
            #expect(try await api.enqueuedCount() == queued)
        }
    }

    /// Runs a worker with `registry` on the stack's queue while `body` runs.
    static func withWorker(_ api: APIStack, _ registry: JobHandlerRegistry, _ body: () async throws -> Void) async throws {
        var settings = QueueConsumer.Settings(concurrency: 4)
        settings.blockTimeout = .milliseconds(200)
        var configuration = WorkerService.Configuration(queues: ["default": settings])
        configuration.promoteInterval = .milliseconds(50)
        let worker = WorkerService(configuration: configuration, jobQueue: api.jobQueue, registry: registry, logger: TestRedis.logger)
        let running = Task { try await worker.run() }
        defer { worker.stop() }
        try await body()
        worker.stop()
        _ = try? await running.value
    }
}

/// The fan-out, then `afterwards`, then the batches may go: what happens between a push
/// being split into batches and its batches being sent.
struct AfterFanOut: JobHandler {
    let inner: PushJobHandler
    let gate: Gate
    let afterwards: @Sendable () async throws -> Void

    func handle(_ job: JobContext) async throws -> String? {
        let result = try await inner.handle(job)
        try await afterwards()
        await gate.open()
        return result
    }
}

/// A batch that waits for the gate.
struct AfterGate: JobHandler {
    let gate: Gate
    let inner: PushBatchJobHandler

    func handle(_ job: JobContext) async throws -> String? {
        await gate.wait()
        return try await inner.handle(job)
    }
}

actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters = []
    }

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }
}

/// A value a test sets after a handler that reads it was made.
final class Box: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: String

    init(_ value: String) { stored = value }

    var value: String {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
