import Crypto
import Entitlements
import Foundation

/// Who may call the API: each publisher's Bearer tokens and Cleeng credentials, and the
/// operators' admin token, read from the environment variables the catalog names. Only
/// SHA-256 digests are kept; presented secrets are compared with every candidate in
/// constant time, so neither timing nor an early exit tells how close a guess was.
public struct APICredentials: Sendable {
    private let tokens: [(publisher: String, digest: SHA256Digest)]
    /// Publisher id -> the digest of its Cleeng Basic credentials.
    private let cleengBasic: [String: SHA256Digest]
    private let admin: SHA256Digest?

    /// Fails naming the first variable the catalog names that the environment leaves unset.
    public init(catalog: EntitlementCatalog, environment: [String: String], adminToken: String?) throws(APIConfigurationError) {
        func value(_ variable: String, _ what: String) throws(APIConfigurationError) -> String {
            guard let value = environment[variable], !value.isEmpty else {
                throw APIConfigurationError("\(what): the environment variable \(variable) is not set")
            }
            return value
        }
        var tokens: [(String, SHA256Digest)] = []
        var cleengBasic: [String: SHA256Digest] = [:]
        for publisher in catalog.publishers {
            guard let access = publisher.api else { continue }
            for variable in access.tokenVariables {
                tokens.append((publisher.id, SHA256.hash(data: Data(try value(variable, "publisher \"\(publisher.id)\" API token").utf8))))
            }
            if let credentials = access.cleeng {
                let basic = try value(credentials.basicAuthVariable, "publisher \"\(publisher.id)\" Cleeng Basic credentials")
                guard basic.contains(":") else {
                    throw APIConfigurationError(
                        "publisher \"\(publisher.id)\": \(credentials.basicAuthVariable) must hold user:password")
                }
                cleengBasic[publisher.id] = SHA256.hash(data: Data(basic.utf8))
            }
        }
        self.tokens = tokens
        self.cleengBasic = cleengBasic
        self.admin = adminToken.flatMap { $0.isEmpty ? nil : SHA256.hash(data: Data($0.utf8)) }
    }

    /// The publisher this Bearer token belongs to.
    func publisher(bearer token: String) -> String? {
        let digest = SHA256.hash(data: Data(token.utf8))
        var found: String?
        for candidate in tokens where Self.equal(candidate.digest, digest) && found == nil { found = candidate.publisher }
        return found
    }

    /// The publisher whose token (`X-Publisher-Token`) and Cleeng Basic credentials
    /// (`user:password`) these are.
    func publisher(cleengToken: String, basicCredentials: String) -> String? {
        let basic = SHA256.hash(data: Data(basicCredentials.utf8))
        guard let id = publisher(bearer: cleengToken), let expected = cleengBasic[id] else { return nil }
        return Self.equal(expected, basic) ? id : nil
    }

    var hasAdminToken: Bool { admin != nil }

    func isAdmin(bearer token: String) -> Bool {
        guard let admin else { return false }
        return Self.equal(admin, SHA256.hash(data: Data(token.utf8)))
    }

    /// Constant time over the 32 bytes.
    static func equal(_ a: SHA256Digest, _ b: SHA256Digest) -> Bool {
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}

/// The API cannot start: the message names what to fix.
public struct APIConfigurationError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
