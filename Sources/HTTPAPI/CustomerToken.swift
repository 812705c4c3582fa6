import AppStore
import Crypto
import EntitleCore
import Entitlements
import Foundation

/// Which customer an app acts for, proven by a short-lived JWT that the publisher's backend
/// signs for its logged-in user: header `{"alg": "HS256" or "ES256", "kid": ...}`, claims
/// `sub` (the customer id), `aud` (the publisher id), `exp` and `iat` (seconds since 1970).
/// The app sends it as `X-Customer-Token` with its app key.
///
/// Checked: the size (4 KiB at most), no `crit` header, the algorithm against the key's (no `none`, no
/// algorithm switching), the signature, `aud`, `exp` (30 s of leeway for clocks), a lifetime
/// no longer than the publisher allows, and `sub` against the publisher's customer names.
struct CustomerToken: Sendable, Hashable {
    let customer: String
    let expires: Date

    /// One key the publisher signs customer tokens with.
    struct Key: Sendable {
        enum Verification: Sendable {
            /// HS256 with any of these secrets (several during a rotation).
            case hmac([Secret])
            case es256(P256.Signing.PublicKey)
        }
        let kid: String
        let verification: Verification

        var algorithm: String {
            switch verification {
            case .hmac: "HS256"
            case .es256: "ES256"
            }
        }
    }

    /// Why a customer token is refused (the message is for the app's developers).
    struct Refusal: Error, Sendable, Hashable {
        let message: String
    }

    static let maximumSize = 4096
    static let leeway: TimeInterval = 30

    static func verify(
        _ token: String, publisher: Publisher, keys: [Key], now: Date = Date()
    ) throws(Refusal) -> CustomerToken {
        guard let settings = publisher.api?.customerTokens, !keys.isEmpty else {
            throw Refusal(message: "publisher \(publisher.id) has no customer-token keys configured")
        }
        guard token.utf8.count <= maximumSize else { throw Refusal(message: "the customer token is longer than \(maximumSize) bytes") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = AppleBase64.decode(String(parts[0])),
            let payloadBytes = AppleBase64.decode(String(parts[1])), let signature = AppleBase64.decode(String(parts[2]))
        else { throw Refusal(message: "the customer token is not a JWT (three base64url parts)") }
        struct Header: Decodable { var alg: String?; var kid: String?; var crit: [String]? }
        guard let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else {
            throw Refusal(message: "the customer token's header is not JSON")
        }
        // RFC 7515, 4.1.11: a token whose `crit` names an extension the verifier does not
        // understand must be refused, and this verifier understands none.
        guard header.crit == nil else {
            throw Refusal(message: "the customer token's header has crit, and no extension is understood here")
        }
        let key: Key
        if let kid = header.kid {
            guard let named = keys.first(where: { $0.kid == kid }) else { throw Refusal(message: "the customer token's kid is not known") }
            key = named
        } else {
            guard keys.count == 1, let only = keys.first else { throw Refusal(message: "the customer token names no kid") }
            key = only
        }
        guard header.alg == key.algorithm else {
            throw Refusal(message: "the customer token's alg must be \(key.algorithm) for key \(key.kid)")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        switch key.verification {
        case .hmac(let secrets):
            var valid = false
            // Every secret is tried (a rotation has two); the comparison is constant-time.
            for secret in secrets
            where HMAC<SHA256>.isValidAuthenticationCode(
                signature, authenticating: signingInput, using: SymmetricKey(data: Array(secret.value.utf8)))
            {
                valid = true
            }
            guard valid else { throw Refusal(message: "the customer token's signature is not valid") }
        case .es256(let publicKey):
            guard signature.count == 64, let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature),
                publicKey.isValidSignature(ecdsa, for: SHA256.hash(data: signingInput))
            else { throw Refusal(message: "the customer token's signature is not valid") }
        }
        guard let claims = try? JSONSerialization.jsonObject(with: Data(payloadBytes)) as? [String: Any] else {
            throw Refusal(message: "the customer token's claims are not a JSON object")
        }
        guard let customer = claims["sub"] as? String, !customer.isEmpty else {
            throw Refusal(message: "the customer token has no sub (the customer id)")
        }
        let audiences = (claims["aud"] as? String).map { [$0] } ?? (claims["aud"] as? [String]) ?? []
        guard audiences.contains(publisher.id) else { throw Refusal(message: "the customer token's aud is not \(publisher.id)") }
        guard let expiry = seconds(claims["exp"]) else { throw Refusal(message: "the customer token has no numeric exp") }
        let nowSeconds = now.timeIntervalSince1970
        guard expiry + leeway > nowSeconds else { throw Refusal(message: "the customer token has expired") }
        let issued = seconds(claims["iat"]) ?? nowSeconds
        guard issued <= nowSeconds + leeway else { throw Refusal(message: "the customer token is issued in the future") }
        guard expiry - issued <= Double(settings.maxLifetimeSeconds) else {
            throw Refusal(message: "the customer token lives longer than \(settings.maxLifetimeSeconds) s")
        }
        if let notBefore = seconds(claims["nbf"]), notBefore > nowSeconds + leeway {
            throw Refusal(message: "the customer token is not valid yet")
        }
        return CustomerToken(customer: customer, expires: Date(timeIntervalSince1970: expiry))
    }

    /// A JSON number of seconds, finite and within the dates anyone asks about.
    private static func seconds(_ value: Any?) -> Double? {
        guard let number = value as? NSNumber, !(value is Bool) else { return nil }
        let seconds = number.doubleValue
        return seconds.isFinite && (0...253_402_300_799).contains(seconds) ? seconds : nil
    }
}
