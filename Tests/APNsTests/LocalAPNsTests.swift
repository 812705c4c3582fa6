import AsyncHTTPClient
import Crypto
import Foundation
import LocalAPNs
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Testing

/// The local APNs over real HTTP/2 and TLS on loopback: what it accepts and records, what it
/// refuses with Apple's status and reason, the per-connection token rule, and injected faults.
@Suite struct LocalAPNsTests {
    @Test func acceptedPushIsRecordedWithItsHeaders() async throws {
        try await LocalAPNsHarness.run { apns, client in
            let before = Int64(Date().timeIntervalSince1970 * 1000)
            let apnsId = "123e4567-e89b-12d3-a456-4266554400a0"
            let reply = try await apns.send(
                on: client,
                headers: [
                    ("apns-push-type", "alert"), ("apns-priority", "5"), ("apns-expiration", "1900000000"),
                    ("apns-collapse-id", "score"), ("apns-id", apnsId),
                ],
                body: #"{"aps":{"alert":"Goal"},"match":7}"#)
            #expect(reply.status == 200)
            #expect(reply.version == .http2)
            #expect(reply.apnsId == apnsId.uppercased())
            #expect(reply.uniqueId.flatMap(UUID.init(uuidString:)) != nil)
            #expect(reply.body.isEmpty)

            // No apns-id, no priority: APNs makes the id; the record says no priority was sent.
            let second = try await apns.send(on: client, token: String(repeating: "AB", count: 100), body: #"{"aps":{}}"#)
            #expect(second.status == 200)
            #expect(second.apnsId.flatMap(UUID.init(uuidString:))?.uuidString == second.apnsId)

            let pushes = await apns.server.state.pushes()
            try #require(pushes.count == 2)
            let push = pushes[0]
            #expect(push.token == LocalAPNsHarness.deviceToken)
            #expect(push.topic == LocalAPNsHarness.bundleId)
            #expect(push.pushType == "alert")
            #expect(push.priority == 5)
            #expect(push.expiration == 1_900_000_000)
            #expect(push.collapseId == "score")
            #expect(push.apnsId == apnsId.uppercased())
            #expect(push.payload == #"{"aps":{"alert":"Goal"},"match":7}"#)
            #expect(push.keyId == LocalAPNsHarness.keyId)
            #expect(push.teamId == LocalAPNsHarness.teamId)
            #expect(push.receivedAt >= before && push.receivedAt <= Int64(Date().timeIntervalSince1970 * 1000))
            #expect(pushes[1].token == String(repeating: "AB", count: 100))
            #expect(pushes[1].priority == nil)
            #expect(pushes[1].expiration == nil)
            #expect(pushes[1].apnsId == second.apnsId)
            #expect(await apns.server.state.statusCounts() == [200: 2])

            await apns.server.state.clearPushes()
            #expect(await apns.server.state.pushes().isEmpty)
        }
    }

    @Test func clientsThatDoNotTrustTheAuthorityCannotConnect() async throws {
        try await LocalAPNsHarness.run { apns, _ in
            try await apns.withClient(trustingAuthority: false) { client in
                // The server's certificate chains to the local authority alone, not to any system root.
                // The handshake fails at once; the deadline is long only so that a loaded machine
                // cannot turn that failure into a timeout (it did, with 2 s, in a full run).
                await #expect(throws: NIOSSLError.self) {
                    try await apns.send(on: client, body: #"{"aps":{}}"#, timeout: .seconds(30))
                }
            }
            #expect(await apns.server.state.pushes().isEmpty)
        }
    }

    @Test func refusesAsAppleDoes() async throws {
        try await LocalAPNsHarness.run { apns, client in
            let payload = #"{"aps":{"alert":"Hi"}}"#
            let now = Date()
            let stranger = P256.Signing.PrivateKey()
            struct Case {
                var name: String
                var method: HTTPMethod = .POST
                var path: String?
                var token = LocalAPNsHarness.deviceToken
                var authorization: String?? = .none
                var headers: [(String, String)] = [("apns-push-type", "alert")]
                var topic: String? = LocalAPNsHarness.bundleId
                var body: String?
                var status: Int
                var reason: String
            }
            let base = Case(name: "", body: payload, status: 0, reason: "")
            func refusal(_ name: String, _ status: Int, _ reason: String, _ change: (inout Case) -> Void) -> Case {
                var refusal = base
                refusal.name = name
                refusal.status = status
                refusal.reason = reason
                change(&refusal)
                return refusal
            }
            let cases: [Case] = [
                refusal("GET", 405, "MethodNotAllowed") { $0.method = .GET },
                refusal("wrong path", 404, "BadPath") { $0.path = "/3/devices/\(LocalAPNsHarness.deviceToken)" },
                refusal("no token in path", 400, "MissingDeviceToken") { $0.path = "/3/device/" },
                refusal("no authorization", 403, "MissingProviderToken") { $0.authorization = .some(nil) },
                refusal("not bearer", 403, "MissingProviderToken") { $0.authorization = "basic abc" },
                refusal("not a JWT", 403, "InvalidProviderToken") { $0.authorization = "bearer abc.def" },
                refusal("signed by another key", 403, "InvalidProviderToken") {
                    $0.authorization = "bearer " + LocalAPNsHarness.providerToken(signedBy: stranger, issuedAt: now)
                },
                refusal("unknown kid", 403, "InvalidProviderToken") {
                    $0.authorization = "bearer " + apns.providerToken(keyId: "ZZZ999ZZZZ", issuedAt: now)
                },
                refusal("another team", 403, "InvalidProviderToken") {
                    $0.authorization = "bearer " + apns.providerToken(teamId: "XYZ987XYZ9", issuedAt: now)
                },
                refusal("alg not ES256", 403, "InvalidProviderToken") {
                    $0.authorization = "bearer " + apns.providerToken(algorithm: "ES384", issuedAt: now)
                },
                refusal("iat over an hour old", 403, "ExpiredProviderToken") {
                    $0.authorization = "bearer " + apns.providerToken(issuedAt: now.addingTimeInterval(-3700))
                },
                refusal("iat an hour ahead", 403, "InvalidProviderToken") {
                    $0.authorization = "bearer " + apns.providerToken(issuedAt: now.addingTimeInterval(3600))
                },
                refusal("no topic", 400, "MissingTopic") { $0.topic = nil },
                refusal("another app's topic", 400, "TopicDisallowed") { $0.topic = "com.other.app" },
                refusal("unknown suffix", 400, "TopicDisallowed") { $0.topic = LocalAPNsHarness.bundleId + ".chat" },
                refusal("no push type", 400, "InvalidPushType") { $0.headers = [] },
                refusal("unknown push type", 400, "InvalidPushType") { $0.headers = [("apns-push-type", "banner")] },
                refusal("voip to the app's topic", 400, "BadTopic") { $0.headers = [("apns-push-type", "voip")] },
                refusal("alert to the voip topic", 400, "BadTopic") { $0.topic = LocalAPNsHarness.bundleId + ".voip" },
                refusal("priority 7", 400, "BadPriority") { $0.headers.append(("apns-priority", "7")) },
                refusal("background at priority 10", 400, "BadPriority") {
                    $0.headers = [("apns-push-type", "background"), ("apns-priority", "10")]
                },
                refusal("expiration not seconds", 400, "BadExpirationDate") { $0.headers.append(("apns-expiration", "soon")) },
                refusal("collapse id of 65 bytes", 400, "BadCollapseId") {
                    $0.headers.append(("apns-collapse-id", String(repeating: "c", count: 65)))
                },
                refusal("apns-id not a UUID", 400, "BadMessageId") { $0.headers.append(("apns-id", "push-1")) },
                refusal("token not hex", 400, "BadDeviceToken") { $0.token = String(repeating: "zz", count: 32) },
                refusal("token of 31 bytes", 400, "BadDeviceToken") { $0.token = String(repeating: "ab", count: 31) },
                refusal("token of odd length", 400, "BadDeviceToken") { $0.token = String(repeating: "a", count: 65) },
                refusal("token over 100 bytes", 400, "BadDeviceToken") { $0.token = String(repeating: "ab", count: 101) },
                refusal("repeated topic", 400, "DuplicateHeaders") { $0.headers.append(("apns-topic", LocalAPNsHarness.bundleId)) },
                refusal("empty body", 400, "PayloadEmpty") { $0.body = nil },
                refusal("body not a JSON object", 400, "PayloadEmpty") { $0.body = "[1, 2]" },
                refusal("4097 bytes for an alert", 413, "PayloadTooLarge") { $0.body = LocalAPNsHarness.payload(bytes: 4097) },
                refusal("5121 bytes for a voip push", 413, "PayloadTooLarge") {
                    $0.headers = [("apns-push-type", "voip")]
                    $0.topic = LocalAPNsHarness.bundleId + ".voip"
                    $0.body = LocalAPNsHarness.payload(bytes: 5121)
                },
            ]
            for refusal in cases {
                let reply = try await apns.send(
                    on: client, method: refusal.method, path: refusal.path, token: refusal.token,
                    authorization: refusal.authorization, headers: refusal.headers, topic: refusal.topic, body: refusal.body)
                #expect(reply.status == refusal.status, "\(refusal.name)")
                #expect(reply.reason == refusal.reason, "\(refusal.name)")
                #expect(reply.apnsId.flatMap(UUID.init(uuidString:)) != nil, "\(refusal.name): apns-id")
                #expect(reply.version == .http2, "\(refusal.name)")
            }
            #expect(await apns.server.state.pushes().isEmpty)
            let counts = await apns.server.state.statusCounts()
            #expect(counts.values.reduce(0, +) == cases.count)
            #expect(counts[403] == cases.filter { $0.status == 403 }.count)
        }
    }

    @Test func acceptsWhatAppleAllows() async throws {
        try await LocalAPNsHarness.run { apns, client in
            let bundleId = LocalAPNsHarness.bundleId
            let accepted: [(pushType: String, topic: String, priority: String?, body: String)] = [
                ("voip", bundleId + ".voip", "10", LocalAPNsHarness.payload(bytes: 5120)),
                ("alert", bundleId, "10", LocalAPNsHarness.payload(bytes: 4096)),
                ("background", bundleId, "5", #"{"aps":{"content-available":1}}"#),
                ("background", bundleId, nil, #"{"aps":{"content-available":1}}"#),
                ("liveactivity", bundleId + ".push-type.liveactivity", "1", #"{"aps":{"event":"update"}}"#),
                ("complication", bundleId + ".complication", nil, #"{"aps":{}}"#),
                ("fileprovider", bundleId + ".pushkit.fileprovider", nil, #"{"aps":{}}"#),
            ]
            for push in accepted {
                var headers = [("apns-push-type", push.pushType), ("apns-topic", push.topic)]
                if let priority = push.priority { headers.append(("apns-priority", priority)) }
                let reply = try await apns.send(on: client, headers: headers, topic: nil, body: push.body)
                #expect(reply.status == 200, "\(push.pushType) to \(push.topic): \(reply.reason ?? "")")
            }
            let recorded = await apns.server.state.pushes()
            #expect(recorded.map(\.pushType) == accepted.map(\.pushType))
            #expect(recorded.map(\.topic) == accepted.map(\.topic))
            #expect(recorded.first?.payload.utf8.count == 5120)
        }
    }

    @Test func aConnectionMayChangeItsTokenOnceIn20Minutes() async throws {
        try await LocalAPNsHarness.run { apns, first in
            let now = Date()
            let tokens = (0..<3).map { apns.providerToken(issuedAt: now.addingTimeInterval(Double(-$0))) }
            #expect(Set(tokens).count == 3)
            func push(_ client: HTTPClient, _ token: String) async throws -> LocalAPNsHarness.Reply {
                try await apns.send(on: client, authorization: "bearer " + token, body: #"{"aps":{}}"#)
            }
            #expect(try await push(first, tokens[0]).status == 200)
            #expect(try await push(first, tokens[0]).status == 200)
            // One change is allowed…
            #expect(try await push(first, tokens[1]).status == 200)
            // …a second one within 20 minutes is not.
            let refused = try await push(first, tokens[2])
            #expect(refused.status == 429)
            #expect(refused.reason == "TooManyProviderTokenUpdates")
            // The refused token did not replace the connection's token.
            #expect(try await push(first, tokens[1]).status == 200)

            // A new connection starts with whichever token it likes.
            let fresh = try await apns.withClient { second in try await push(second, tokens[2]) }
            #expect(fresh.status == 200)
            #expect(await apns.server.state.statusCounts() == [200: 5, 429: 1])
        }
    }

    @Test func unregisteredFaultAnswersItsTimestampUntilCleared() async throws {
        try await LocalAPNsHarness.run { apns, client in
            let gone = String(repeating: "0f", count: 32)
            await apns.server.state.inject(
                .init(token: gone.uppercased(), status: 410, reason: "Unregistered", timestamp: 1_700_000_000_123))
            for _ in 0..<2 {
                let reply = try await apns.send(on: client, token: gone, body: #"{"aps":{}}"#)
                #expect(reply.status == 410)
                #expect(reply.reason == "Unregistered")
                #expect(reply.timestamp == 1_700_000_000_123)
            }
            // Other tokens are not affected; a refusal of Apple's checks comes before any fault.
            #expect(try await apns.send(on: client, body: #"{"aps":{}}"#).status == 200)
            #expect(try await apns.send(on: client, token: gone, body: "").reason == "PayloadEmpty")
            await apns.server.state.clearFaults()
            #expect(try await apns.send(on: client, token: gone, body: #"{"aps":{}}"#).status == 200)
            #expect(await apns.server.state.pushes().map(\.token) == [LocalAPNsHarness.deviceToken, gone])
        }
    }

    @Test func faultWithACountAnswersThatManyTimesThenAccepts() async throws {
        try await LocalAPNsHarness.run { apns, client in
            await apns.server.state.inject(.init(status: 429, reason: "TooManyRequests", count: 2))
            var replies: [LocalAPNsHarness.Reply] = []
            for _ in 0..<3 {
                replies.append(try await apns.send(on: client, body: #"{"aps":{}}"#))
            }
            #expect(replies.map(\.status) == [429, 429, 200])
            #expect(replies.map(\.reason) == ["TooManyRequests", "TooManyRequests", nil])
            #expect(replies[0].timestamp == nil)
            #expect(await apns.server.state.pushes().count == 1)
            #expect(await apns.server.state.statusCounts() == [429: 2, 200: 1])
        }
    }

    @Test func serverLetsAConnectionOpenAtLeast500Streams() async throws {
        try await LocalAPNsHarness.run { apns, _ in
            // AsyncHTTPClient hides HTTP/2's SETTINGS frame: read the server's first frame off the wire.
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(apns.server.certificateAuthorityPEM.utf8)))
            tls.applicationProtocols = ["h2"]
            // This client stops reading once it has the frame: it need not wait for the server's close_notify.
            tls.shutdownTimeout = .milliseconds(100)
            let context = try NIOSSLContext(configuration: tls)
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: apns.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                        return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            let settings = try await channel.executeThenClose { inbound, outbound in
                // The client preface, then an empty SETTINGS frame.
                try await outbound.write(ByteBuffer(bytes: Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 4, 0, 0, 0, 0, 0]))
                var received = ByteBuffer()
                for try await chunk in inbound {
                    received.writeImmutableBuffer(chunk)
                    guard let header = received.getBytes(at: received.readerIndex, length: 9) else { continue }
                    let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
                    guard header[3] == 4, received.readableBytes >= 9 + length else { continue }
                    return received.getBytes(at: received.readerIndex + 9, length: length) ?? []
                }
                return []
            }
            var values: [Int: UInt32] = [:]
            for offset in stride(from: 0, to: settings.count - 5, by: 6) {
                let identifier = Int(settings[offset]) << 8 | Int(settings[offset + 1])
                values[identifier] = settings[(offset + 2)...(offset + 5)].reduce(0) { $0 << 8 | UInt32($1) }
            }
            // SETTINGS_MAX_CONCURRENT_STREAMS is setting 3.
            #expect((values[3] ?? 0) >= 500)
        }
    }

    @Test func manyConcurrentPushesOnOneClientAreAllRecorded() async throws {
        try await LocalAPNsHarness.run { apns, client in
            // One push first, so the rest share its HTTP/2 connection.
            #expect(try await apns.send(on: client, body: #"{"aps":{}}"#).status == 200)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<600 {
                    group.addTask { try await apns.send(on: client, body: #"{"aps":{},"n":\#(index)}"#).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 600 && statuses.allSatisfy { $0 == 200 })
            let pushes = await apns.server.state.pushes()
            #expect(pushes.count == 601)
            #expect(Set(pushes.map(\.apnsId)).count == 601)
        }
    }
}

/// A local APNs on a free loopback port with one registered key, for one test.
private struct LocalAPNsHarness: Sendable {
    static let keyId = "ABC123DEFG"
    static let teamId = "DEF123GHIJ"
    static let bundleId = "com.entitle.demo"
    static let deviceToken = String(repeating: "a1", count: 32)

    let server: LocalAPNsServer
    let port: Int
    let key: P256.Signing.PrivateKey
    /// One token for the harness's requests: a connection may not change tokens at will.
    let token: String

    struct Reply: Sendable {
        var status: Int
        var version: HTTPVersion
        var apnsId: String?
        var uniqueId: String?
        var body: String
        var reason: String?
        var timestamp: Int64?
    }

    /// Runs `body` against a fresh server, with a client that trusts its authority.
    static func run(_ body: @Sendable (LocalAPNsHarness, HTTPClient) async throws -> Void) async throws {
        var configuration = LocalAPNsServer.Configuration()
        configuration.port = 0
        var logger = Logger(label: "local-apns-test")
        logger.logLevel = .critical
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let server = try LocalAPNsServer(configuration: configuration, logger: logger) { continuation.yield($0) }
        let key = P256.Signing.PrivateKey()
        await server.state.register(
            .init(keyId: keyId, teamId: teamId, publicKeyPEM: key.publicKey.pemRepresentation, topics: [bundleId]))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw CancellationError() }
            let token = providerToken(signedBy: key, issuedAt: Date())
            let harness = LocalAPNsHarness(server: server, port: port, key: key, token: token)
            try await harness.withClient { client in try await body(harness, client) }
            group.cancelAll()
        }
    }

    /// Runs `body` with a new HTTP client (so a new connection) that negotiates HTTP/2 and trusts
    /// only the server's authority, or the system's roots only.
    @discardableResult
    func withClient<Result: Sendable>(
        trustingAuthority: Bool = true, _ body: (HTTPClient) async throws -> Result
    ) async throws -> Result {
        var tls = TLSConfiguration.makeClientConfiguration()
        if trustingAuthority {
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(server.certificateAuthorityPEM.utf8)))
        }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        do {
            let result = try await body(client)
            try await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Sends one request; `authorization` `nil` sends the harness's token, `.some(nil)` none at all.
    func send(
        on client: HTTPClient, method: HTTPMethod = .POST, path: String? = nil, token: String = deviceToken,
        authorization: String?? = .none, headers: [(String, String)] = [("apns-push-type", "alert")],
        topic: String? = bundleId, body: String?, timeout: TimeAmount = .seconds(10)
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: "https://127.0.0.1:\(port)" + (path ?? "/3/device/\(token)"))
        request.method = method
        switch authorization {
        case .none: request.headers.add(name: "authorization", value: "bearer \(self.token)")
        case .some(.some(let value)): request.headers.add(name: "authorization", value: value)
        case .some(.none): break
        }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let topic { request.headers.add(name: "apns-topic", value: topic) }
        if let body, !body.isEmpty { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await client.execute(request, timeout: timeout)
        let text = String(buffer: try await response.body.collect(upTo: 1 << 16))
        let json = text.isEmpty ? nil : (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        return Reply(
            status: Int(response.status.code), version: response.version, apnsId: response.headers.first(name: "apns-id"),
            uniqueId: response.headers.first(name: "apns-unique-id"), body: text, reason: json?["reason"] as? String,
            timestamp: (json?["timestamp"] as? NSNumber)?.int64Value)
    }

    /// A provider token as Apple describes it: ES256 over base64url header and claims, raw R‖S.
    static func providerToken(
        signedBy key: P256.Signing.PrivateKey, keyId: String = keyId, teamId: String = teamId, algorithm: String = "ES256",
        issuedAt: Date
    ) -> String {
        let header = base64URL(Data(#"{"alg":"\#(algorithm)","kid":"\#(keyId)"}"#.utf8))
        let claims = base64URL(Data(#"{"iss":"\#(teamId)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#.utf8))
        let signature = (try? key.signature(for: Data("\(header).\(claims)".utf8)))?.rawRepresentation ?? Data()
        return "\(header).\(claims).\(base64URL(signature))"
    }

    func providerToken(keyId: String = keyId, teamId: String = teamId, algorithm: String = "ES256", issuedAt: Date) -> String {
        Self.providerToken(signedBy: key, keyId: keyId, teamId: teamId, algorithm: algorithm, issuedAt: issuedAt)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// A JSON object of exactly `bytes` bytes.
    static func payload(bytes: Int) -> String {
        let frame = #"{"aps":{},"pad":""}"#
        return #"{"aps":{},"pad":"\#(String(repeating: "x", count: bytes - frame.utf8.count))"}"#
    }
}
