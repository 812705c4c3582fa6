import AsyncHTTPClient
import EntitleCore
import Foundation
import HTTPTestSupport
import Hummingbird
import NIOCore
import NIOHTTP1
import RedisTestSupport
import Testing

/// The steps end-to-end tests repeat: buying at the simulator, claiming through the API,
/// waiting for jobs, reading access back.
extension APIStack {
    /// A control call to the simulator; the answer as JSON (an object, or `[:]`).
    @discardableResult
    func simulator(_ path: String, _ json: String? = nil, method: HTTPMethod? = nil) async throws -> [String: Any] {
        let any = try await simulatorJSON(path, json, method: method)
        return any as? [String: Any] ?? [:]
    }

    func simulatorJSON(_ path: String, _ json: String? = nil, method: HTTPMethod? = nil, limit: Int = 1 << 24) async throws -> Any? {
        var request = HTTPClientRequest(url: simulatorURL + path)
        request.method = method ?? (json == nil ? .GET : .POST)
        if let json { request.body = .bytes(ByteBuffer(string: json)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: limit)
        try #require((200..<300).contains(Int(response.status.code)), "\(path) answered \(response.status): \(String(buffer: body))")
        return try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))
    }

    /// Buys at the simulator for `account` (a new Apple account when `nil`), through the app
    /// of `publisher` (`DemoCatalogs.bundleId`: the demo app unless it is `keep`, `share` or
    /// `softphone`): `{signedTransaction, appReceipt, transactionId, ...}`.
    func buy(
        _ product: String, account: String? = nil, appAccountToken: String? = nil, publisher: String = "demo", extra: [String: Any] = [:]
    ) async throws -> [String: Any] {
        let bundle = DemoCatalogs.bundleId(publisher)
        var body: [String: Any] = ["bundleId": bundle, "productId": "\(bundle).\(product)"]
        if let account { body["appleAccount"] = account }
        if let appAccountToken { body["appAccountToken"] = appAccountToken }
        body.merge(extra) { $1 }
        let json = String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)
        return try await simulator("/simulator/purchases", json)
    }

    /// The simulator's "now".
    func simulatorNow() async throws -> Date {
        let clock = try await simulator("/simulator/clock")
        return Date(timeIntervalSince1970: (clock["now"] as? Double ?? 0) / 1000)
    }

    func advance(seconds: Double) async throws { try await simulator("/simulator/clock/advance", #"{"seconds":\#(seconds)}"#) }

    /// `POST /v1/purchases` for a publisher; the job id.
    func submit(_ body: [String: Any], token: String = demoToken) async throws -> String {
        let reply = try await call(.POST, "/v1/purchases", token: token, json: body, route: "POST /v1/purchases")
        try #require(reply.status == 202, "POST /v1/purchases answered \(reply.status): \(reply.text)")
        return try #require(reply.json["jobId"] as? String)
    }

    /// Waits for a job to finish; its document (`status`, `result`, ...).
    func finished(_ id: String, token: String = demoToken, headers: [String: String] = [:]) async throws -> [String: Any] {
        var document: [String: Any] = [:]
        try await eventually("job \(id) to finish", timeout: .seconds(60)) {
            document = try await call(.GET, "/v1/jobs/\(id)?wait=10", token: token, headers: headers, route: "GET /v1/jobs/{id}").json
            return ["succeeded", "failed"].contains(document["status"] as? String ?? "")
        }
        return document
    }

    /// The result of a job that must succeed.
    func result(_ id: String, token: String = demoToken, headers: [String: String] = [:]) async throws -> [String: Any] {
        let document = try await finished(id, token: token, headers: headers)
        try #require(document["status"] as? String == "succeeded", "job \(id): \(document)")
        return try #require(document["result"] as? [String: Any])
    }

    /// Submits and waits: the receipt job's result.
    func claim(_ body: [String: Any], token: String = demoToken) async throws -> [String: Any] {
        try await result(try await submit(body, token: token), token: token)
    }

    /// `POST /v1/transfers`, waited for.
    func transfer(_ originalTransactionId: String, to: String, from: String?, token: String = demoToken) async throws -> [String: Any] {
        var body = ["originalTransactionId": originalTransactionId, "to": to]
        if let from { body["from"] = from }
        let reply = try await call(.POST, "/v1/transfers", token: token, json: body, route: "POST /v1/transfers")
        try #require(reply.status == 202, "POST /v1/transfers answered \(reply.status): \(reply.text)")
        return try await result(try #require(reply.json["jobId"] as? String), token: token)
    }

    /// `GET /v1/customers/{id}/access/{offerId}`.
    func access(_ customer: String, _ offer: String, token: String = demoToken) async throws -> Bool {
        let path = "/v1/customers/\(Self.escape(customer))/access/\(offer)"
        let reply = try await call(.GET, path, token: token, route: "GET /v1/customers/{id}/access/{offerId}")
        try #require(reply.status == 200, "\(path): \(reply.status) \(reply.text)")
        return try #require(reply.json["accessGranted"] as? Bool)
    }

    /// `GET /v1/customers/{id}/entitlements[?at=]`; `[:]` for an unknown customer.
    func customer(_ customer: String, at: Date? = nil, token: String = demoToken) async throws -> [String: Any] {
        var path = "/v1/customers/\(Self.escape(customer))/entitlements"
        if let at { path += "?at=\(Int64((at.timeIntervalSince1970 * 1000).rounded(.down)))" }
        let reply = try await call(.GET, path, token: token, route: "GET /v1/customers/{id}/entitlements")
        if reply.status == 404 { return [:] }
        try #require(reply.status == 200, "\(path): \(reply.status) \(reply.text)")
        return reply.json
    }

    static func escape(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    /// Posts what the simulator sent (recorded in the inbox) to the API's notification route
    /// for `publisher`, as Apple would; the notification job's result.
    func forward(_ entry: RequestLog.Entry, publisher: String = "demo") async throws -> [String: Any] {
        let reply = try await call(
            .POST, "/v1/notifications/apple/\(publisher)", token: nil, body: String(decoding: entry.body, as: UTF8.self),
            route: "POST /v1/notifications/apple/{publisherId}")
        try #require(reply.status == 200, "the notification route answered \(reply.status): \(reply.text)")
        return try await result(try #require(reply.json["jobId"] as? String))
    }
}

extension APIStack {
    /// The V2 notification the simulator sent with this UUID, as recorded in the inbox.
    func sentNotification(_ uuid: String) async throws -> RequestLog.Entry {
        var found: RequestLog.Entry?
        try await eventually("notification \(uuid) to reach the inbox") {
            found = await inbox.entries.first { $0.path.hasSuffix("/v2") && Self.notificationUUID(of: $0) == uuid }
            return found != nil
        }
        return try #require(found)
    }

    /// The `notificationUUID` inside a V2 body (read without verifying: the test only routes it).
    static func notificationUUID(of entry: RequestLog.Entry) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any],
            let signed = object["signedPayload"] as? String
        else { return nil }
        let parts = signed.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard let data = Data(base64Encoded: base64), let payload = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return nil
        }
        return payload["notificationUUID"] as? String
    }
}

extension APIStack {
    /// Waits until everything the last steps set off is done: the simulator has delivered
    /// its notifications, the forwarder has handed them on, and no job is queued, running or
    /// about to run (a deferred one comes back within a second). Renewal checks wait in the
    /// renewal index, which this stack's worker sweeps only when asked (`sweep:`).
    func settle(timeout: Duration = .seconds(60)) async throws {
        let keys = jobQueue.configuration.keys("default")
        var quiet = 0
        try await eventually("notifications delivered and jobs finished", timeout: timeout) {
            let deliveries = try await simulator("/simulator/notifications/pending")
            let forwarding = await forwarder.inFlight
            let stats = try await jobQueue.stats(queue: "default")
            let soon = Int64((Date().timeIntervalSince1970 + 2) * 1000)
            let due = try await jobQueue.redis.send(["ZRANGEBYSCORE", keys.scheduled, "-inf", String(soon), "LIMIT", "0", "1"])
            let idle =
                deliveries["pending"] as? Int == 0 && forwarding == 0 && stats.pending == 0 && stats.active == 0
                && (due.array ?? []).isEmpty
            quiet = idle ? quiet + 1 : 0
            // Twice in a row: nothing was between two steps of a hand-over.
            return quiet >= 2
        }
    }
}

extension APIStack {
    static let webhookSecret = "webhook-secret-0123456789abcdef"

    /// `run` with a webhook receiver for demo (its deliveries at `/hooks` in the log; `answer`
    /// decides each one's status, 200 unless it says otherwise) and demo's webhook taking
    /// `typeNames` (`lifecycle` unless given).
    static func runWithWebhooks(
        _ name: String, typeNames: String = "lifecycle", notify: [String] = ["demo"], sweep: Bool = false,
        answer: @escaping @Sendable (RequestLog.Entry) async -> HTTPResponse.Status = { _ in .ok },
        catalog change: @escaping @Sendable (inout [[String: Any]]) -> Void = { _ in },
        settings tune: @escaping @Sendable (inout EntitleConfiguration) -> Void = { _ in },
        _ body: @Sendable @escaping (APIStack, RequestLog) async throws -> Void
    ) async throws {
        let hooks = RequestLog()
        let receiver = Router()
        receiver.post("hooks") { request, _ -> Response in
            let entry = try await hooks.record(request)
            return Response(status: await answer(entry))
        }
        try await LoopbackServer.run(receiver) { hookURL in
            try await APIStack.run(
                name, worker: true, sweep: sweep, notify: notify, environment: ["ENTITLE_TEST_WEBHOOK_SECRET": webhookSecret],
                catalog: { publishers in
                    for index in publishers.indices where publishers[index]["id"] as? String == "demo" {
                        publishers[index]["webhook"] = [
                            "url": hookURL + "/hooks", "secretVariable": "ENTITLE_TEST_WEBHOOK_SECRET", "typeNames": typeNames,
                        ]
                    }
                    change(&publishers)
                }, settings: tune
            ) { api in try await body(api, hooks) }
        }
    }

    /// A customer's lifecycle events, newest first (`GET /v1/customers/{id}/events`, every page).
    func events(_ customer: String, token: String = demoToken) async throws -> [[String: Any]] {
        var events: [[String: Any]] = []
        var before: String?
        repeat {
            let path = "/v1/customers/\(Self.escape(customer))/events?limit=200" + (before.map { "&before=\($0)" } ?? "")
            let reply = try await call(.GET, path, token: token, route: "GET /v1/customers/{id}/events")
            if reply.status == 404 { return [] }
            try #require(reply.status == 200, "\(path): \(reply.status) \(reply.text)")
            events += reply.json["events"] as? [[String: Any]] ?? []
            before = reply.json["next"] as? String
        } while before != nil
        return events
    }

    /// Folds what the event log holds into the reports, as the worker's folder does.
    func foldReports(_ publisher: String = "demo") async throws {
        let found = try #require(settings.catalog.publisher(publisher))
        let generation = try await reports.reports.generation(publisher)
        try await reports.fold(found, generation: generation)
    }
}
