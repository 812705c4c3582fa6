import AppStore
import Crypto
import Foundation
import Synchronization

/// The In-App Purchase keys the simulator accepts, and the check of each App Store Server
/// API request's bearer token against them: ES256 by a registered key (`kid`), its issuer
/// (`iss`), audience `appstoreconnect-v1`, its bundle id (`bid`), not expired, and living
/// at most 60 minutes.
public final class APIKeyRegistry: Sendable {
    /// `POST /simulator/keys`.
    public struct Registration: Codable, Sendable, Hashable {
        public var keyId: String
        public var issuerId: String
        public var bundleId: String
        /// The public key in PEM (`-----BEGIN PUBLIC KEY-----`).
        public var publicKey: String

        public init(keyId: String, issuerId: String, bundleId: String, publicKey: String) {
            self.keyId = keyId
            self.issuerId = issuerId
            self.bundleId = bundleId
            self.publicKey = publicKey
        }
    }

    struct Key: Sendable {
        var issuerId: String
        var bundleId: String
        var publicKey: P256.Signing.PublicKey
    }

    /// Why a token was refused; Apple answers all of them with a bare 401.
    public struct Unauthorized: Error, Sendable {
        public let reason: String
    }

    private let keys = Mutex<[String: Key]>([:])
    /// Tokens whose signature and claims were checked already, with their bundle id and
    /// expiry: a client reuses one token for many requests (up to 60 minutes), and checking
    /// its signature again each time was most of a request's cost. Emptied when a key is
    /// registered, and when it holds `acceptedLimit` tokens.
    private let accepted = Mutex<[String: (bundleId: String, expires: Double)]>([:])
    private static let acceptedLimit = 1024

    public init() {}

    public func register(_ registration: Registration) throws {
        guard !registration.keyId.isEmpty, !registration.issuerId.isEmpty, !registration.bundleId.isEmpty else {
            throw SimulatorError(.invalidRequest, "keyId, issuerId and bundleId must not be empty")
        }
        let publicKey: P256.Signing.PublicKey
        do {
            publicKey = try P256.Signing.PublicKey(pemRepresentation: registration.publicKey)
        } catch {
            throw SimulatorError(.invalidRequest, "publicKey is not a P-256 public key in PEM form")
        }
        keys.withLock {
            $0[registration.keyId] = Key(issuerId: registration.issuerId, bundleId: registration.bundleId, publicKey: publicKey)
            accepted.withLock { $0.removeAll() }
        }
    }

    /// Checks an `Authorization` header; returns the bundle id the token is for.
    public func authenticate(_ authorization: String?, now: Date = Date()) throws(Unauthorized) -> String {
        guard let authorization, authorization.hasPrefix("Bearer ") else { throw Unauthorized(reason: "no bearer token") }
        if let known = accepted.withLock({ $0[authorization] }) {
            guard known.expires > now.timeIntervalSince1970 else { throw Unauthorized(reason: "expired") }
            return known.bundleId
        }
        let parts = authorization.dropFirst(7).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = AppleBase64.decode(parts[0]).map { Data($0) },
            let claimsBytes = AppleBase64.decode(parts[1]).map { Data($0) },
            let signatureBytes = AppleBase64.decode(parts[2]).map { Data($0) },
            let header = (try? JSONSerialization.jsonObject(with: headerBytes)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimsBytes)) as? [String: Any]
        else { throw Unauthorized(reason: "the token is not a JWT") }
        guard header["alg"] as? String == "ES256", let keyId = header["kid"] as? String,
            let key = keys.withLock({ $0[keyId] })
        else { throw Unauthorized(reason: "unknown key or algorithm") }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8))
        else { throw Unauthorized(reason: "bad signature") }
        guard claims["iss"] as? String == key.issuerId, claims["aud"] as? String == "appstoreconnect-v1",
            claims["bid"] as? String == key.bundleId
        else { throw Unauthorized(reason: "wrong issuer, audience or bundle id") }
        guard let expires = (claims["exp"] as? NSNumber)?.doubleValue, expires > now.timeIntervalSince1970 else {
            throw Unauthorized(reason: "expired")
        }
        let issued = (claims["iat"] as? NSNumber)?.doubleValue ?? now.timeIntervalSince1970
        guard issued <= now.timeIntervalSince1970 + 60, expires - issued <= 3600 + 60 else {
            throw Unauthorized(reason: "the token lives longer than 60 minutes")
        }
        // Under the keys' lock: a key registered meanwhile empties the cache after this.
        keys.withLock { current in
            guard let same = current[keyId], same.issuerId == key.issuerId, same.bundleId == key.bundleId,
                same.publicKey.rawRepresentation == key.publicKey.rawRepresentation
            else { return }
            accepted.withLock {
                if $0.count >= Self.acceptedLimit { $0.removeAll() }
                $0[authorization] = (key.bundleId, expires)
            }
        }
        return key.bundleId
    }
}
