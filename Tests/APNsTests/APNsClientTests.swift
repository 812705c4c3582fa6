import APNs
import Crypto
import Foundation
import LocalAPNs
import Logging
import Testing

/// The APNs client against the local APNs on loopback (HTTP/2, TLS, Apple's checks).
@Suite struct APNsClientTests {
    static let bundleId = "com.example.news"
    static let token = DeviceToken(String(repeating: "0f", count: 32))!

    /// A local APNs on a free port, a key it knows for `bundleId`, and a client with that key.
    static func run(registered: Bool = true, _ body: (APNsClient, LocalAPNs) async throws -> Void) async throws {
        var quiet = Logger(label: "apns-client-test")
        quiet.logLevel = .critical
        var configuration = LocalAPNsServer.Configuration()
        configuration.port = 0
        let (ports, listening) = AsyncStream<Int>.makeStream()
        let server = try LocalAPNsServer(configuration: configuration, logger: quiet) { listening.yield($0) }
        let key = P256.Signing.PrivateKey()
        if registered {
            await server.state.register(
                LocalAPNs.Key(keyId: "KEY0000001", teamId: "TEAM000001", publicKeyPEM: key.publicKey.pemRepresentation, topics: [bundleId]))
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next() else { throw CancellationError() }
            var settings = APNsClient.Configuration()
            settings.productionURL = "https://127.0.0.1:\(port)"
            settings.sandboxURL = settings.productionURL
            let client = APNsClient(
                configuration: settings,
                providerToken: try APNsProviderToken(keyId: "KEY0000001", teamId: "TEAM000001", privateKeyPEM: key.pemRepresentation),
                httpClient: try APNsClient.httpClient(owner: "test", trusting: server.certificateAuthorityPEM))
            try await body(client, server.state)
            group.cancelAll()
        }
    }

    @Test func aPushGoesOutWithApplesHeadersAndComesBackDelivered() async throws {
        try await Self.run { client, apns in
            let push = try APNsPush(
                bundleId: Self.bundleId, pushType: .alert, expiration: 1_900_000_000, collapseId: "issue-12",
                payload: #"{"aps":{"alert":"December is out"},"issue":12}"#)
            let id = UUID()
            let answer = try await client.send(push, to: Self.token, environment: .production, apnsId: id)
            #expect(answer.delivered)
            #expect(answer.apnsId?.lowercased() == id.uuidString.lowercased())
            let voip = try APNsPush(bundleId: Self.bundleId, pushType: .voip, payload: #"{"call":"42"}"#)
            #expect(try await client.send(voip, to: Self.token, environment: .sandbox, apnsId: UUID()).delivered)
            let background = try APNsPush(bundleId: Self.bundleId, pushType: .background, payload: #"{"aps":{"content-available":1}}"#)
            #expect(try await client.send(background, to: Self.token, environment: .production, apnsId: UUID()).delivered)

            let received = await apns.pushes()
            try #require(received.count == 3)
            #expect(received[0].topic == Self.bundleId)
            #expect(received[0].pushType == "alert")
            #expect(received[0].priority == 10)
            #expect(received[0].collapseId == "issue-12")
            #expect(received[0].expiration == 1_900_000_000)
            #expect(received[0].token == Self.token.hex)
            #expect(received[1].topic == Self.bundleId + ".voip")
            #expect(received[2].priority == 5)
            // One provider token for all of them: made once, reused.
            #expect(Set(received.map(\.keyId)) == ["KEY0000001"])
        }
    }

    @Test func whatApnsRefusesComesBackWithApplesReasonAndWhatToDo() async throws {
        try await Self.run(registered: false) { client, _ in
            let push = try APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: #"{"aps":{"alert":"hi"}}"#)
            let answer = try await client.send(push, to: Self.token, environment: .production, apnsId: UUID())
            #expect(answer.status == 403)
            #expect(answer.reason == APNsReason("InvalidProviderToken"))
            #expect(answer.disposition == .failPush)
        }
        try await Self.run { client, apns in
            let elsewhere = try APNsPush(bundleId: "com.example.other", pushType: .alert, payload: #"{"aps":{"alert":"hi"}}"#)
            let disallowed = try await client.send(elsewhere, to: Self.token, environment: .production, apnsId: UUID())
            #expect(disallowed.status == 400)
            #expect(disallowed.reason == APNsReason("TopicDisallowed"))
            #expect(disallowed.disposition == .failPush)

            await apns.inject(LocalAPNs.Fault(token: Self.token.hex, status: 410, reason: "Unregistered", timestamp: 1_795_000_000_000))
            await apns.inject(LocalAPNs.Fault(token: Self.token.hex, status: 429, reason: "TooManyRequests", count: 1))
            await apns.inject(LocalAPNs.Fault(status: 503, reason: "ServiceUnavailable", count: 1))
            let push = try APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: #"{"aps":{"alert":"hi"}}"#)
            let gone = try await client.send(push, to: Self.token, environment: .production, apnsId: UUID())
            #expect(gone.status == 410)
            #expect(gone.unregisteredAt == 1_795_000_000_000)
            #expect(gone.disposition == .dropToken)
            let other = DeviceToken(String(repeating: "1e", count: 32))!
            let busy = try await client.send(push, to: other, environment: .production, apnsId: UUID())
            #expect(busy.status == 503)
            #expect(busy.disposition == .retry)
        }
    }

    @Test func aProviderTokenIsReusedForFiftyMinutesAndRenewedNoSoonerThanTwenty() throws {
        let key = P256.Signing.PrivateKey()
        let token = try APNsProviderToken(keyId: "KEY0000001", teamId: "TEAM000001", privateKeyPEM: key.pemRepresentation)
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        let first = try token.value(now: start)
        #expect(try token.value(now: start.addingTimeInterval(49 * 60)) == first)
        // APNs says it expired ten minutes in: too soon to make another (TooManyProviderTokenUpdates).
        #expect(try token.renew(after: first, now: start.addingTimeInterval(10 * 60)) == false)
        #expect(try token.value(now: start.addingTimeInterval(10 * 60)) == first)
        #expect(try token.renew(after: first, now: start.addingTimeInterval(21 * 60)))
        let second = try token.value(now: start.addingTimeInterval(21 * 60))
        #expect(second != first)
        #expect(try token.value(now: start.addingTimeInterval(72 * 60)) != second)
        // Header and claims as Apple documents them: ES256, kid; iss, iat as a number.
        let parts = first.split(separator: ".").map(String.init)
        try #require(parts.count == 3)
        func decoded(_ part: String) throws -> [String: Any] {
            var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while text.count % 4 != 0 { text += "=" }
            let data = try #require(Data(base64Encoded: text))
            return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        }
        #expect(try decoded(parts[0]) as NSDictionary == ["alg": "ES256", "kid": "KEY0000001"] as NSDictionary)
        #expect(try decoded(parts[1]) as NSDictionary == ["iss": "TEAM000001", "iat": 1_795_000_000] as NSDictionary)
        // A rotation (SIGHUP): the same key changes nothing; a new one signs from the next push.
        #expect(try token.rotate(privateKeyPEM: key.pemRepresentation) == false)
        #expect(try token.value(now: start.addingTimeInterval(72 * 60 + 1)) == token.value(now: start.addingTimeInterval(72 * 60 + 2)))
        let rotated = P256.Signing.PrivateKey()
        let before = try token.value(now: start.addingTimeInterval(80 * 60))
        #expect(try token.rotate(privateKeyPEM: rotated.pemRepresentation))
        let after = try token.value(now: start.addingTimeInterval(80 * 60))
        #expect(after != before)
        let signed = Array(after.split(separator: ".")[0...1].joined(separator: ".").utf8)
        var raw = String(after.split(separator: ".")[2]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while raw.count % 4 != 0 { raw += "=" }
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Data(base64Encoded: raw)))
        #expect(rotated.publicKey.isValidSignature(signature, for: signed))
        #expect(throws: APNsError.self) { try token.rotate(privateKeyPEM: "garbage") }
        #expect(throws: APNsError.self) { try APNsProviderToken(keyId: "KEY\"}", teamId: "T", privateKeyPEM: key.pemRepresentation) }
        #expect(throws: APNsError.self) { try APNsProviderToken(keyId: "KEY1", teamId: "T", privateKeyPEM: "not a key") }
    }

    @Test func pushesApnsWouldRefuseForEveryoneAreRefusedBeforeSending() throws {
        let alert = #"{"aps":{"alert":"hi"}}"#
        #expect(throws: APNsError.self) {
            try APNsPush(bundleId: Self.bundleId, pushType: .background, priority: 10, payload: #"{"aps":{"content-available":1}}"#)
        }
        #expect(throws: APNsError.self) {
            try APNsPush(bundleId: Self.bundleId, pushType: .background, payload: #"{"aps":{"content-available":1,"alert":"x"}}"#)
        }
        #expect(throws: APNsError.self) { try APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: #"{"data":1}"#) }
        #expect(throws: APNsError.self) { try APNsPush(bundleId: Self.bundleId, pushType: .alert, priority: 7, payload: alert) }
        #expect(throws: APNsError.self) {
            try APNsPush(bundleId: Self.bundleId, pushType: .alert, collapseId: String(repeating: "c", count: 65), payload: alert)
        }
        #expect(throws: APNsError.self) { try APNsPush(bundleId: "not a bundle", pushType: .alert, payload: alert) }
        #expect(throws: APNsError.self) { try APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: "[1]") }
        let large = #"{"aps":{"alert":""#
        // 4,096 bytes is the most for an alert; VoIP takes 5,120.
        let fits = large + String(repeating: "x", count: 4096 - large.utf8.count - 3) + #""}}"#
        #expect(fits.utf8.count == 4096)
        #expect((try? APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: fits)) != nil)
        #expect(throws: APNsError.self) {
            try APNsPush(bundleId: Self.bundleId, pushType: .alert, payload: fits.replacingOccurrences(of: "\"}}", with: "x\"}}"))
        }
        #expect(
            (try? APNsPush(bundleId: Self.bundleId, pushType: .voip, payload: fits.replacingOccurrences(of: "\"}}", with: "x\"}}"))) != nil)
        // Device tokens: hex of 32 to 100 bytes, kept lowercase.
        #expect(DeviceToken(String(repeating: "AB", count: 32))?.hex == String(repeating: "ab", count: 32))
        #expect(DeviceToken(String(repeating: "ab", count: 31)) == nil)
        #expect(DeviceToken(String(repeating: "ab", count: 101)) == nil)
        #expect(DeviceToken(String(repeating: "ag", count: 32)) == nil)
    }

    @Test func everyReasonAppleDocumentsHasWhatTheSenderDoes() {
        let expected: [String: APNsReason.Disposition] = [
            "Unregistered": .dropToken, "ExpiredToken": .dropToken, "BadDeviceToken": .dropToken, "DeviceTokenNotForTopic": .dropToken,
            "TooManyRequests": .retry, "InternalServerError": .retry, "ServiceUnavailable": .retry, "Shutdown": .retry,
            "ExpiredProviderToken": .renewProviderToken, "InvalidProviderToken": .failPush, "TopicDisallowed": .failPush,
            "PayloadTooLarge": .failPush, "MissingDeviceToken": .refuseDevice,
        ]
        for (reason, disposition) in expected { #expect(APNsReason(reason).disposition(status: 400) == disposition, "\(reason)") }
        #expect(APNsReason.documented.count >= 32)
        // A reason Apple adds later is classed by its status.
        #expect(APNsReason("SomethingNew").disposition(status: 500) == .retry)
        #expect(APNsReason("SomethingNew").disposition(status: 400) == .refuseDevice)
    }
}
