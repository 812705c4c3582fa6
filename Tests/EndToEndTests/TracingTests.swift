import AsyncHTTPClient
import Foundation
import HTTPTestSupport
import HTTPTypes
import Hummingbird
import LocalProcesses
import NIOCore
import NIOHTTP1
import RedisTestSupport
import Testing

/// Tracing on, end to end: `entitle api` and `entitle worker` as processes export their spans
/// over OTLP/HTTP (JSON) to a receiver in the test. One purchase, sent under a trace of the
/// test's own, is one trace: the API request, the receipt job (enqueue, wait, attempt,
/// handler), its call to Apple (the simulator), the webhook job it enqueues and the webhook's
/// delivery, each span the child of the one before, across the two processes through the job
/// record. No secret, receipt or signed data is in any span.
@Suite struct TracingTests {
    static let apiToken = "tracing-api-token-0123456789"
    static let appKey = "tracing-app-key-0123456789"
    static let customerTokenSecret = "tracing-customer-token-secret-0123456789"
    static let cleengBasic = "tracing-user:tracing-password-0123456789"
    /// The collector's key (OTEL_EXPORTER_OTLP_HEADERS): sent with each export, never logged.
    static let collectorKey = "tracing-collector-key-0123456789"

    @Test(.timeLimit(.minutes(4))) func aPurchaseIsOneTraceFromTheRequestThroughAppleToTheWebhook() async throws {
        let exports = SpanExports()
        let receiver = Router()
        receiver.post("v1/traces") { request, _ -> Response in
            let key = HTTPField.Name("x-collector-key").flatMap { request.headers[$0] }
            await exports.add(Array(try await request.body.collect(upTo: 16 << 20).readableBytesView), key: key)
            return Response.json("{}")
        }
        try await LoopbackServer.run(receiver) { collector in
            try await EntitleStack.run("tracing") { stack in
                let tracing = [
                    "ENTITLE_TRACING": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                    "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_HEADERS": "x-collector-key=\(Self.collectorKey)",
                ]
                let worker = try await stack.startWorker(environment: tracing)
                let (api, url) = try await Self.startAPI(stack, environment: tracing)
                defer { if api.isRunning { api.signal(SIGKILL) } }

                // A caller's trace (W3C traceparent) that the purchase continues.
                let traceId = Self.hex(16)
                let callerSpanId = Self.hex(8)
                let bought = try await stack.purchase("premium.monthly")
                let signedTransaction = try #require(bought["signedTransaction"] as? String)
                let appReceipt = bought["appReceipt"] as? String ?? ""
                let submitted = try await Self.call(
                    url + "/v1/purchases", method: .POST,
                    headers: ["traceparent": "00-\(traceId)-\(callerSpanId)-01"],
                    json: ["customer": "tia@example.com", "signedTransaction": signedTransaction])
                #expect(submitted.status == 202, "\(submitted.json)")
                let jobId = try #require(submitted.json["jobId"] as? String)
                let job = try await Self.call(url + "/v1/jobs/\(jobId)?wait=20", method: .GET)
                #expect(job.json["status"] as? String == "succeeded", "\(job.json)")
                let record = try #require(try await stack.jobQueue.job(id: jobId, queue: "default"))
                #expect(record.traceparent?.hasPrefix("00-\(traceId)-") == true, "the job record carries the trace")

                // Wait for the webhook's delivery span: the last of the trace.
                try await eventually("the worker to export the webhook's delivery", timeout: .seconds(60)) {
                    await exports.spans().contains { $0.traceId == traceId && $0.name == "POST webhook" }
                }
                // Stopping flushes what is left (the API's span ends after its answer is written).
                for process in [api, worker] {
                    process.signal(SIGTERM)
                    #expect(try await process.wait(timeout: .seconds(30)) == 0)
                }
                // The collector's key went with every export; the API's log (at info) names the
                // variable swift-otel read but not its value.
                #expect(await exports.keys() == [Self.collectorKey])
                #expect(api.errors.contains("environment_key=OTEL_EXPORTER_OTLP_TRACES_HEADERS"), "\(api.errors)")
                #expect(!api.errors.contains(Self.collectorKey) && !worker.errors.contains(Self.collectorKey))

                let spans = await exports.spans().filter { $0.traceId == traceId }
                func one(_ name: String, _ where: (ExportedSpan) -> Bool = { _ in true }) throws -> ExportedSpan {
                    let found = spans.filter { $0.name == name && `where`($0) }
                    try #require(found.count == 1, "one span \(name), got \(found.count) of \(spans.map(\.name))")
                    return found[0]
                }
                func isAncestor(_ ancestor: ExportedSpan, of span: ExportedSpan) -> Bool {
                    var current: ExportedSpan? = span
                    while let next = current?.parentSpanId.flatMap({ id in spans.first { $0.spanId == id } }) {
                        if next.spanId == ancestor.spanId { return true }
                        current = next
                    }
                    return false
                }

                // The API request continues the caller's trace, in the API's process.
                let request = try one("POST /v1/purchases")
                #expect(request.parentSpanId == callerSpanId && request.service == "entitle-api" && request.kind == 2)
                #expect(request.attributes["http.request.method"] == "POST" && request.attributes["http.route"] == "/v1/purchases")
                #expect(request.attributes["http.response.status_code"] == "202")
                // The receipt job: enqueued in the request; waited, tried and handled in the worker.
                let enqueue = try one("job.enqueue receipt")
                #expect(enqueue.parentSpanId == request.spanId && enqueue.service == "entitle-api" && enqueue.kind == 4)
                let wait = try one("job.wait receipt")
                let attempt = try one("job.attempt receipt")
                #expect(wait.parentSpanId == enqueue.spanId && attempt.parentSpanId == enqueue.spanId)
                #expect(attempt.service == "entitle-worker" && attempt.kind == 5)
                #expect(attempt.attributes["entitle.job.id"] == jobId && attempt.attributes["entitle.job.type"] == "receipt")
                #expect(attempt.attributes["entitle.job.queue"] == "default" && attempt.attributes["entitle.job.attempt"] == "1")
                #expect(attempt.attributes["entitle.job.outcome"] == "succeeded", "\(attempt.attributes)")
                #expect(wait.start <= attempt.start && wait.end <= attempt.start + 1_000_000)
                let handler = try one("job.handler receipt")
                #expect(handler.parentSpanId == attempt.spanId)
                // Apple (the simulator's App Store Server API), asked by the handler.
                let apple = spans.filter { $0.attributes["url.template"]?.hasPrefix("/inApps/") == true }
                #expect(!apple.isEmpty, "the receipt job asked Apple: \(spans.map(\.name))")
                for call in apple {
                    #expect(isAncestor(handler, of: call) && call.kind == 3 && call.service == "entitle-worker")
                    #expect(call.name == "\(call.attributes["http.request.method"] ?? "?") \(call.attributes["url.template"] ?? "?")")
                    #expect(call.attributes["http.response.status_code"] == "200" && call.attributes["server.address"] == "127.0.0.1")
                }
                // The webhook jobs the purchase made (enqueued by the handler with the change's
                // other follow-ups), in the same trace, and their deliveries.
                let webhookAttempts = spans.filter { $0.name == "job.attempt webhook" }
                #expect(!webhookAttempts.isEmpty, "\(spans.map(\.name))")
                for webhookAttempt in webhookAttempts {
                    let enqueued = spans.first { $0.spanId == webhookAttempt.parentSpanId }
                    #expect(enqueued?.name.hasPrefix("job.enqueue") == true && enqueued.map { isAncestor(handler, of: $0) } == true)
                    #expect(webhookAttempt.attributes["entitle.job.outcome"] == "succeeded")
                }
                let deliveries = spans.filter { $0.name == "POST webhook" }
                #expect(deliveries.count == webhookAttempts.count)
                for delivery in deliveries {
                    let handler = spans.first { $0.spanId == delivery.parentSpanId }
                    #expect(handler?.name == "job.handler webhook" && delivery.kind == 3)
                    #expect(delivery.attributes["http.response.status_code"] == "200" && delivery.attributes["entitle.publisher"] == "demo")
                }
                // Every span of the trace is one of these, in one tree rooted at the caller.
                for span in spans { #expect(span.parentSpanId == callerSpanId || isAncestor(request, of: span), "\(span.name)") }

                // No secret, receipt or signed data anywhere in what was exported, nor any
                // URL query, full URL or header; no attribute holds a JWS or JWT ("eyJ").
                // Nor the customer's id (an email here): spans name routes, not paths.
                let raw = await exports.text()
                let secrets = [
                    Self.apiToken, Self.appKey, Self.customerTokenSecret, Self.cleengBasic, EntitleStack.webhookSecret, signedTransaction,
                    String(signedTransaction.split(separator: ".").last ?? ""), appReceipt, "tia@example.com",
                ].filter { !$0.isEmpty }
                #expect(secrets.count == 9, "the purchase gave a signed transaction and an app receipt")
                let leaked = secrets.filter { raw.contains($0) }.map { "\($0.prefix(12))..." }
                #expect(leaked.isEmpty, "exported spans hold secrets or signed data: \(leaked)")
                let all = await exports.spans()
                #expect(all.count >= spans.count)
                for span in all {
                    for (key, value) in span.attributes {
                        #expect(!["url.query", "url.full", "url.path"].contains(key) && !key.contains("header"), "\(span.name): \(key)")
                        #expect(!value.contains("eyJ") && value.utf8.count < 256, "\(span.name): \(key) = \(value.prefix(40))")
                    }
                }
            }
        }
    }

    /// `entitle api` on a free port with the stack's Redis, prefix and catalog (the `other`
    /// publisher given a token of its own); returns the process and its URL.
    static func startAPI(_ stack: EntitleStack, environment extra: [String: String]) async throws -> (ChildProcess, String) {
        var catalog = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: stack.catalogPath))) as? [String: Any])
        var publishers = try #require(catalog["publishers"] as? [[String: Any]])
        for index in publishers.indices where publishers[index]["id"] as? String == "other" {
            publishers[index]["api"] = ["tokenVariables": ["TRACING_OTHER_TOKEN"]]
        }
        catalog["publishers"] = publishers
        let path = FileManager.default.temporaryDirectory.appending(path: "tracing-catalog-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: catalog).write(to: URL(fileURLWithPath: path))
        var environment = [
            "ENTITLE_ENV": "development", "ENTITLE_SIMULATOR_URL": stack.simulatorURL,
            "ENTITLE_TEST_WEBHOOK_SECRET": EntitleStack.webhookSecret, "ENTITLE_DEMO_API_TOKEN": apiToken,
            "ENTITLE_DEMO_APP_KEY": appKey, "ENTITLE_DEMO_CUSTOMER_TOKEN_SECRET": customerTokenSecret,
            "ENTITLE_DEMO_CLEENG_BASIC": cleengBasic, "TRACING_OTHER_TOKEN": "tracing-other-token-0123456789",
        ]
        environment.merge(extra) { $1 }
        let api = try ChildProcess(
            ChildProcess.entitleExecutable,
            ["api", "--port", "0", "--redis", stack.redisURL, "--prefix", stack.prefix, "--catalog", path, "--log-level", "info"],
            environment: environment)
        try await eventually("the API to listen") {
            if !api.isRunning { throw SpawnError(message: "the API exited: \(api.errors)") }
            return api.output.contains("api listening on ")
        }
        let url = try #require(api.output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix("http://") }.map(String.init))
        return (api, url)
    }

    static func call(
        _ url: String, method: HTTPMethod, headers: [String: String] = [:], json: [String: Any]? = nil
    ) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(apiToken)")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json)))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let body = try await response.body.collect(upTo: 1 << 22)
        let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]) ?? [:]
        return (Int(response.status.code), object)
    }

    /// `count` random bytes as lowercase hex.
    static func hex(_ count: Int) -> String {
        (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}

/// A span as OTLP/JSON carries it, with ids in hex and every attribute value as text.
struct ExportedSpan: Sendable {
    var traceId: String
    var spanId: String
    var parentSpanId: String?
    var name: String
    /// OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    var kind: Int
    var start: UInt64
    var end: UInt64
    var attributes: [String: String]
    /// The exporting process's `service.name`.
    var service: String
}

/// What the receiver got: the raw bodies, and their spans decoded.
actor SpanExports {
    private var bodies: [[UInt8]] = []
    /// The collector keys the exports came with.
    private var collectorKeys: Set<String> = []

    func add(_ body: [UInt8], key: String?) {
        bodies.append(body)
        collectorKeys.insert(key ?? "none")
    }

    func keys() -> Set<String> { collectorKeys }

    func text() -> String { bodies.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "\n") }

    func spans() -> [ExportedSpan] {
        var spans: [ExportedSpan] = []
        for body in bodies {
            guard let document = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { continue }
            for resource in document["resourceSpans"] as? [[String: Any]] ?? [] {
                let service = Self.attributes((resource["resource"] as? [String: Any])?["attributes"])["service.name"] ?? ""
                for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                    for span in scope["spans"] as? [[String: Any]] ?? [] {
                        let parent = Self.id(span["parentSpanId"])
                        spans.append(
                            ExportedSpan(
                                traceId: Self.id(span["traceId"]), spanId: Self.id(span["spanId"]),
                                parentSpanId: parent.isEmpty ? nil : parent, name: span["name"] as? String ?? "",
                                kind: Self.integer(span["kind"]), start: UInt64(Self.integer(span["startTimeUnixNano"])),
                                end: UInt64(Self.integer(span["endTimeUnixNano"])), attributes: Self.attributes(span["attributes"]),
                                service: service))
                    }
                }
            }
        }
        return spans
    }

    /// Trace and span ids: hex as OTLP/JSON specifies, or base64 as protobuf's JSON writes bytes.
    static func id(_ value: Any?) -> String {
        guard let text = value as? String, !text.isEmpty else { return "" }
        if (text.count == 32 || text.count == 16), text.allSatisfy(\.isHexDigit) { return text.lowercased() }
        guard let bytes = Data(base64Encoded: text) else { return text }
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func integer(_ value: Any?) -> Int {
        if let number = value as? Int { return number }
        if let text = value as? String { return Int(text) ?? 0 }
        return 0
    }

    /// `[{"key", "value": {"stringValue" | "intValue" | ...}}]` as text by key.
    static func attributes(_ value: Any?) -> [String: String] {
        var attributes: [String: String] = [:]
        for attribute in value as? [[String: Any]] ?? [] {
            guard let key = attribute["key"] as? String, let value = (attribute["value"] as? [String: Any])?.values.first else { continue }
            attributes[key] = "\(value)"
        }
        return attributes
    }
}
