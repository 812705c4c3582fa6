import Crypto
import Foundation
import Synchronization

/// The provider token (an ES256 JWT: `kid` the key id, `iss` the team id, `iat`) signed with
/// the publisher's `.p8` key, made once and reused.
///
/// Apple rejects a token older than an hour (`ExpiredProviderToken`) and one changed more
/// than once in 20 minutes on a connection (`TooManyProviderTokenUpdates`): a token is
/// renewed after `lifetime` (50 minutes), and an APNs request to renew it early is honoured
/// only when the token is at least 20 minutes old.
public final class APNsProviderToken: Sendable {
    public let keyId: String
    public let teamId: String
    /// The key (replaced by a rotation) and the token made with it.
    private let current: Mutex<(key: P256.Signing.PrivateKey, token: (value: String, issuedAt: Date)?)>

    /// How long a token is used before a new one is made.
    public static let lifetime: TimeInterval = 50 * 60
    /// The least time between two tokens.
    public static let minimumAge: TimeInterval = 20 * 60

    /// - Parameter privateKeyPEM: the `.p8` file's contents.
    public init(keyId: String, teamId: String, privateKeyPEM: String) throws(APNsError) {
        guard Self.isIdentifier(keyId), Self.isIdentifier(teamId) else {
            throw APNsError(.invalidConfiguration, "the key id and team id are Apple's ten-character identifiers")
        }
        current = Mutex((try Self.key(privateKeyPEM), nil))
        self.keyId = keyId
        self.teamId = teamId
    }

    static func key(_ pem: String) throws(APNsError) -> P256.Signing.PrivateKey {
        do {
            return try P256.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw APNsError(.invalidConfiguration, "the APNs key is not a P-256 .p8 key in PEM form")
        }
    }

    /// Takes the key as its file or variable holds it now (SIGHUP): a different key is used
    /// from the next push on, with a token of its own. Returns whether it changed.
    @discardableResult
    public func rotate(privateKeyPEM: String) throws(APNsError) -> Bool {
        let key = try Self.key(privateKeyPEM)
        return current.withLock { state in
            guard state.key.publicKey.rawRepresentation != key.publicKey.rawRepresentation else { return false }
            state = (key, nil)
            return true
        }
    }

    /// The token to send now. Made under the lock: a hundred pushes starting at once must
    /// share one token (ECDSA signatures differ each time, and APNs counts every new token on
    /// a connection as an update).
    public func value(now: Date = Date()) throws(APNsError) -> String {
        try current.withLock { state throws(APNsError) -> String in
            if let token = state.token, now.timeIntervalSince(token.issuedAt) < Self.lifetime,
                now >= token.issuedAt.addingTimeInterval(-60)
            {
                return token.value
            }
            let made = try make(now: now, key: state.key)
            state.token = made
            return made.value
        }
    }

    /// APNs said `rejected` has expired: a new token, unless the one in use is younger than
    /// 20 minutes (a clock far off, or another sender's token); then `false`, nothing changes.
    public func renew(after rejected: String, now: Date = Date()) throws(APNsError) -> Bool {
        try current.withLock { state throws(APNsError) -> Bool in
            guard let existing = state.token, existing.value == rejected else { return true }
            guard now.timeIntervalSince(existing.issuedAt) >= Self.minimumAge else { return false }
            state.token = try make(now: now, key: state.key)
            return true
        }
    }

    private func make(now: Date, key: P256.Signing.PrivateKey) throws(APNsError) -> (value: String, issuedAt: Date) {
        let issuedAt = Int64(now.timeIntervalSince1970)
        let header = #"{"alg":"ES256","kid":"\#(keyId)"}"#
        let claims = #"{"iss":"\#(teamId)","iat":\#(issuedAt)}"#
        let input = Self.base64URL(Array(header.utf8)) + "." + Self.base64URL(Array(claims.utf8))
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try key.signature(for: Array(input.utf8))
        } catch {
            throw APNsError(.invalidConfiguration, "the provider token cannot be signed")
        }
        return (input + "." + Self.base64URL(Array(signature.rawRepresentation)), Date(timeIntervalSince1970: TimeInterval(issuedAt)))
    }

    /// Apple's key and team ids: ten letters and digits (longer ones are taken, for keys made
    /// elsewhere, but nothing that could break out of the JSON).
    static func isIdentifier(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            }
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}

// The key and the token are secrets: a dump or a log line shows the ids only.
extension APNsProviderToken: CustomStringConvertible, CustomReflectable {
    public var description: String { "APNsProviderToken(keyId: \(keyId), teamId: \(teamId))" }
    public var customMirror: Mirror { Mirror(self, children: ["description": description]) }
}
