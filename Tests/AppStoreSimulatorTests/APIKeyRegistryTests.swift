import AppStore
import AppStoreSimulator
import Crypto
import Foundation
import Testing

/// The simulator's check of bearer tokens, once a token has been accepted: a client reuses
/// one token for many requests, and the simulator remembers what it checked, but never past
/// the token's expiry or a change of its key.
@Suite struct APIKeyRegistryTests {
    static func registration(
        _ keyId: String, _ key: P256.Signing.PrivateKey, bundleId: String = "com.entitle.demo"
    )
        -> APIKeyRegistry.Registration
    {
        APIKeyRegistry.Registration(keyId: keyId, issuerId: "iss", bundleId: bundleId, publicKey: key.publicKey.pemRepresentation)
    }

    static func bearer(_ keyId: String, _ key: P256.Signing.PrivateKey, issued: Double, expires: Double) throws -> String {
        func encode(_ object: [String: Any]) throws -> String {
            AppleBase64.encodeURL(try JSONSerialization.data(withJSONObject: object))
        }
        let input =
            try encode(["alg": "ES256", "kid": keyId, "typ": "JWT"]) + "."
            + (try encode(["iss": "iss", "aud": "appstoreconnect-v1", "bid": "com.entitle.demo", "iat": issued, "exp": expires]))
        return "Bearer " + input + "." + AppleBase64.encodeURL(try key.signature(for: Data(input.utf8)).rawRepresentation)
    }

    /// A registry that has accepted `token` (key `K1`, living 600 s from `now`) once.
    static func accepted() throws -> (registry: APIKeyRegistry, key: P256.Signing.PrivateKey, token: String, now: Date) {
        let registry = APIKeyRegistry()
        let key = P256.Signing.PrivateKey()
        try registry.register(Self.registration("K1", key))
        let now = Date()
        let token = try Self.bearer("K1", key, issued: now.timeIntervalSince1970, expires: now.timeIntervalSince1970 + 600)
        #expect(try registry.authenticate(token, now: now) == "com.entitle.demo")
        return (registry, key, token, now)
    }

    @Test func anAcceptedTokenIsRefusedOnceItExpires() throws {
        let (registry, _, token, now) = try Self.accepted()
        #expect(try registry.authenticate(token, now: now.addingTimeInterval(599)) == "com.entitle.demo")
        let late = #expect(throws: APIKeyRegistry.Unauthorized.self) { try registry.authenticate(token, now: now.addingTimeInterval(601)) }
        #expect(late?.reason == "expired")
    }

    @Test func anAcceptedTokenIsCheckedAgainAfterItsKeyChanges() throws {
        let (registry, key, token, now) = try Self.accepted()
        // The key id now names another key: the token's signature no longer holds.
        try registry.register(Self.registration("K1", P256.Signing.PrivateKey()))
        let refused = #expect(throws: APIKeyRegistry.Unauthorized.self) { try registry.authenticate(token, now: now) }
        #expect(refused?.reason == "bad signature")
        // The same key for another app: the token's bundle id no longer matches.
        try registry.register(Self.registration("K1", key, bundleId: "com.other"))
        let other = #expect(throws: APIKeyRegistry.Unauthorized.self) { try registry.authenticate(token, now: now) }
        #expect(other?.reason == "wrong issuer, audience or bundle id")
    }
}
