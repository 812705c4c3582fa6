import AppStore
import AppStoreSimulator
import AsyncHTTPClient
import Crypto
import Foundation
import HTTPTestSupport
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import Testing

/// A real simulator on a free loopback port, with a real notification receiver, for one test.
struct SimulatorHarness: Sendable {
    static let bundleId = "com.entitle.demo"
    static let sharedSecret = "demo-shared-secret-0123456789abcdef"

    let baseURL: String
    let server: SimulatorServer
    /// What the notification receiver got: V2 at `/v2`, V1 at `/v1`.
    let inbox: RequestLog
    let verifier: SignedDataVerifier

    /// One pair of authorities for every test: minting RSA keys costs a CPU-second in debug builds.
    static let authorities = Result { (try SigningAuthority(), try ReceiptSigningAuthority()) }

    static var demoCatalog: SimulatorCatalog {
        get throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            return try SimulatorCatalog(contentsOf: root.appending(path: "Config/simulator-catalog.json"))
        }
    }

    /// Runs `body` against a fresh simulator whose notifications go to a loopback receiver.
    /// `receiverStatus` decides the receiver's answer to the n-th V2 delivery (from 1).
    static func run<Result: Sendable>(
        retryDelays: [Duration] = [.milliseconds(200), .milliseconds(200)],
        receiverStatus: @escaping @Sendable (Int) -> HTTPResponse.Status = { _ in .ok },
        _ body: @Sendable (SimulatorHarness) async throws -> Result
    ) async throws -> Result {
        let inbox = RequestLog()
        let receiver = Router()
        receiver.post("v2") { request, _ -> Response in
            try await inbox.record(request)
            return Response(status: receiverStatus(await inbox.count("/v2")))
        }
        receiver.post("v1") { request, _ -> Response in
            try await inbox.record(request)
            return Response(status: .ok)
        }
        return try await LoopbackServer.run(receiver) { receiverURL in
            var configuration = SimulatorServer.Configuration(catalog: try demoCatalog)
            configuration.port = 0
            configuration.authorities = try authorities.get()
            configuration.notifications = .init(url: receiverURL + "/v2", v1URL: receiverURL + "/v1")
            configuration.notifications.retryDelays = retryDelays
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            var logger = Logger(label: "simulator-test")
            logger.logLevel = .critical
            let server = try SimulatorServer(configuration: configuration, logger: logger) { continuation.yield($0) }
            return try await withThrowingTaskGroup(of: Result?.self) { group in
                group.addTask {
                    try await server.run()
                    return nil
                }
                var iterator = ports.makeAsyncIterator()
                guard let port = await iterator.next() else { throw CancellationError() }
                let verifier = SignedDataVerifier(
                    configuration: .init(bundleId: bundleId, environment: .sandbox, roots: [server.store.signing.root]))
                let harness = SimulatorHarness(baseURL: "http://127.0.0.1:\(port)", server: server, inbox: inbox, verifier: verifier)
                let result = try await body(harness)
                group.cancelAll()
                return result
            }
        }
    }

    // MARK: HTTP

    struct Reply: Sendable {
        var status: Int
        var body: [UInt8]
        var headers: [(String, String)]

        func decode<Value: Decodable>(_ type: Value.Type) throws -> Value {
            try JSONDecoder().decode(Value.self, from: Data(body))
        }

        var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]) ?? [:] }
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    func request(_ method: HTTPMethod, _ path: String, json: String? = nil, headers: [(String, String)] = []) async throws -> Reply {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 16 << 20)
        return Reply(
            status: Int(response.status.code), body: Array(body.readableBytesView), headers: response.headers.map { ($0.name, $0.value) })
    }

    func post(_ path: String, _ json: String = "") async throws -> Reply { try await request(.POST, path, json: json) }
    func get(_ path: String) async throws -> Reply { try await request(.GET, path) }

    /// Buys a product (`extra` adds JSON fields) and checks the simulator accepted it.
    func purchase(_ productId: String, _ extra: String = "") async throws -> PurchaseResult {
        let reply = try await post(
            "/simulator/purchases", #"{"bundleId":"\#(Self.bundleId)","productId":"\#(productId)"\#(extra.isEmpty ? "" : ",")\#(extra)}"#)
        try #require(reply.status == 201, "purchase answered \(reply.status): \(reply.text)")
        return try reply.decode(PurchaseResult.self)
    }

    func event(_ path: String, _ json: String = "") async throws -> Reply { try await post("/simulator/" + path, json) }

    func subscriptionEvent(_ id: String, _ event: String, _ json: String = "") async throws -> SubscriptionSnapshot {
        let reply = try await post("/simulator/subscriptions/\(id)/\(event)", json)
        try #require(reply.status == 200, "\(event) answered \(reply.status): \(reply.text)")
        return try reply.decode(SubscriptionSnapshot.self)
    }

    func transactionEvent(_ id: String, _ event: String, _ json: String = "") async throws -> TransactionSnapshot {
        let reply = try await post("/simulator/transactions/\(id)/\(event)", json)
        try #require(reply.status == 200, "\(event) answered \(reply.status): \(reply.text)")
        return try reply.decode(TransactionSnapshot.self)
    }

    func advance(seconds: Double) async throws {
        let reply = try await post("/simulator/clock/advance", #"{"seconds":\#(seconds)}"#)
        try #require(reply.status == 200, "advance answered \(reply.status): \(reply.text)")
    }

    // MARK: Notifications

    /// The first `count` V2 notifications the receiver got, verified against the simulator's root.
    func notifications(count: Int) async throws -> [NotificationPayload] {
        let entries = await inbox.wait(for: "/v2", count: count)
        try #require(entries.count >= count, "expected \(count) notifications, got \(entries.count)")
        return try await entries.prefix(count).asyncMap { entry in
            let body = try JSONDecoder().decode([String: String].self, from: Data(entry.body))
            return try await verifier.verifyNotification(try #require(body["signedPayload"]))
        }
    }

    /// The V2 notification with this `notificationUUID`, once the receiver has it.
    func received(_ uuid: String) async throws -> NotificationPayload {
        var seen = 0
        while true {
            let entries = await inbox.wait(for: "/v2", count: seen + 1)
            try #require(entries.count > seen, "notification \(uuid) never arrived")
            for entry in entries[seen...] {
                let body = try JSONDecoder().decode([String: String].self, from: Data(entry.body))
                let payload = try await verifier.verifyNotification(try #require(body["signedPayload"]))
                if payload.notificationUUID == uuid { return payload }
            }
            seen = entries.count
        }
    }

    /// The latest notification's type and subtype (after `count` arrived).
    func lastNotification(count: Int) async throws -> NotificationPayload {
        try #require(try await notifications(count: count).last)
    }

    // MARK: App Store Server API

    /// Registers a fresh key and returns a client for it against the simulator's sandbox.
    func apiClient(environment: AppStoreEnvironment = .sandbox, fallback: Bool = true) async throws -> AppStoreServerAPIClient {
        let key = P256.Signing.PrivateKey()
        let keyId = "KEY" + String(UUID().uuidString.prefix(6))
        let registration =
            #"{"keyId":"\#(keyId)","issuerId":"issuer-1","bundleId":"\#(Self.bundleId)","publicKey":"\#(key.publicKey.pemRepresentation.replacingOccurrences(of: "\n", with: "\\n"))"}"#
        let reply = try await post("/simulator/keys", registration)
        try #require(reply.status == 204, "keys answered \(reply.status): \(reply.text)")
        var configuration = AppStoreServerAPIClient.Configuration(
            keyId: keyId, issuerId: "issuer-1", bundleId: Self.bundleId, environment: environment)
        configuration.productionURL = baseURL
        configuration.sandboxURL = baseURL + "/sandbox"
        configuration.sandboxFallback = fallback
        return try AppStoreServerAPIClient(configuration: configuration, privateKeyPEM: key.pemRepresentation)
    }

    func verifyReceiptClient(secret: String? = SimulatorHarness.sharedSecret) -> VerifyReceiptClient {
        var configuration = VerifyReceiptClient.Configuration()
        configuration.productionURL = baseURL + "/verifyReceipt"
        configuration.sandboxURL = baseURL + "/sandbox/verifyReceipt"
        configuration.sharedSecret = secret
        return VerifyReceiptClient(configuration: configuration)
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
