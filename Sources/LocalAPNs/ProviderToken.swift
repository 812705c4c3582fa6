import Crypto
import Foundation

/// A provider token (the JWT after `bearer `) whose ES256 signature a registered key verified.
struct ProviderToken: Sendable, Hashable {
    let keyId: String
    let teamId: String
    /// `iat`, seconds since 1970.
    let issuedAt: Int64

    /// Checks `jwt` as Apple describes it in "Establishing a token-based connection to APNs": three
    /// base64url parts; a header with `alg` ES256 and a `kid` naming a registered key; claims with `iss`
    /// (that key's team) and `iat`; a signature by that key, raw R‖S as JWS (RFC 7518) requires.
    /// Time is not checked here: the result is cached, the clock moves on.
    static func verify(_ jwt: Substring, keys: [String: RegisteredKey]) throws(APNsRefusal) -> ProviderToken {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = base64URLDecoded(parts[0]), let claimsData = base64URLDecoded(parts[1]),
            let signatureData = base64URLDecoded(parts[2]),
            let header = try? JSONDecoder().decode(Header.self, from: headerData),
            let claims = try? JSONDecoder().decode(Claims.self, from: claimsData)
        else { throw .invalidProviderToken }
        guard header.alg == "ES256", let key = keys[header.kid], let publicKey = key.publicKey, claims.iss == key.teamId,
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else { throw .invalidProviderToken }
        return ProviderToken(keyId: header.kid, teamId: claims.iss, issuedAt: claims.iat)
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String
    }

    private struct Claims: Decodable {
        var iss: String
        var iat: Int64

        enum CodingKeys: String, CodingKey { case iss, iat }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            iss = try container.decode(String.self, forKey: .iss)
            if let seconds = try? container.decode(Int64.self, forKey: .iat) {
                iat = seconds
            } else if let text = try? container.decode(String.self, forKey: .iat), let seconds = Int64(text) {
                // Apple's example has a number; APNSwift sends a string, and APNs accepts both.
                iat = seconds
            } else {
                throw DecodingError.dataCorruptedError(forKey: .iat, in: container, debugDescription: "iat is not whole seconds")
            }
        }
    }

    /// Base64url without padding, as JWS writes it; `nil` for anything else.
    static func base64URLDecoded(_ text: Substring) -> Data? {
        guard !text.isEmpty, text.count % 4 != 1 else { return nil }
        var base64 = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        guard !base64.contains("=") else { return nil }
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
