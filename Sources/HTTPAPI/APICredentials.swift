import Crypto
import EntitleCore
import Entitlements
import Foundation

/// Who may call the API, read from the secrets the catalog names (a variable, or the file
/// `VARIABLE_FILE` names, several lines for a rotation): each publisher's secret keys and app
/// keys, its Cleeng Basic credentials, its customer-token keys and its apps' shared secrets
/// (V1 notifications), and the operators' admin tokens (`ENTITLE_ADMIN_TOKEN`).
///
/// Bearer keys are kept as SHA-256 digests and compared with every candidate in constant
/// time, so neither timing nor an early exit tells how close a guess was. Printing the
/// credentials shows nothing of them.
package struct APICredentials: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// What a presented Bearer key is.
    enum Holder: Sendable, Hashable {
        /// The publisher's backend: everything the publisher may do.
        case secretKey(publisher: String)
        /// An app: purchases with Apple's proof, and what its customer token allows.
        case appKey(publisher: String, keyId: String)
        /// The operators.
        case admin
    }

    private let bearers: [(holder: Holder, digest: SHA256Digest)]
    /// Publisher id -> the digests of its Cleeng Basic credentials (`user:password`).
    private let cleengBasic: [String: [SHA256Digest]]
    /// Publisher id -> the keys its customer tokens are signed with.
    let customerTokenKeys: [String: [CustomerToken.Key]]
    /// Publisher id -> bundle id -> the app's shared secrets (V1 notifications carry one).
    let sharedSecrets: [String: [String: [Secret]]]

    /// Reads every credential; fails naming the first variable that is unset or unreadable.
    package init(settings: EntitleConfiguration) throws(APIConfigurationError) {
        let secrets = settings.secrets
        func required(_ variable: String, _ what: String) throws(APIConfigurationError) -> [Secret] {
            do {
                return try secrets.required(variable, for: what)
            } catch {
                throw APIConfigurationError(error.problem)
            }
        }
        func digest(_ secret: Secret) -> SHA256Digest { SHA256.hash(data: Array(secret.value.utf8)) }
        var bearers: [(Holder, SHA256Digest)] = []
        var cleengBasic: [String: [SHA256Digest]] = [:]
        var customerTokenKeys: [String: [CustomerToken.Key]] = [:]
        var sharedSecrets: [String: [String: [Secret]]] = [:]
        for publisher in settings.catalog.publishers {
            for app in publisher.apps {
                do {
                    sharedSecrets[publisher.id, default: [:]][app.bundleId] = try settings.sharedSecrets(
                        publisher: publisher.id, bundleId: app.bundleId)
                } catch {
                    throw APIConfigurationError(error.problem)
                }
            }
            guard let access = publisher.api else { continue }
            let name = "publisher \"\(publisher.id)\""
            for variable in access.tokenVariables {
                for token in try required(variable, "\(name) API token") {
                    bearers.append((.secretKey(publisher: publisher.id), digest(token)))
                }
            }
            for key in access.appKeys {
                for token in try required(key.variable, "\(name) app key \"\(key.id)\"") {
                    bearers.append((.appKey(publisher: publisher.id, keyId: key.id), digest(token)))
                }
            }
            if let credentials = access.cleeng {
                for basic in try required(credentials.basicAuthVariable, "\(name) Cleeng Basic credentials") {
                    guard basic.value.contains(":") else {
                        throw APIConfigurationError("\(name): \(credentials.basicAuthVariable) must hold user:password")
                    }
                    cleengBasic[publisher.id, default: []].append(digest(basic))
                }
            }
            for key in access.customerTokens?.keys ?? [] {
                let keyName = "\(name) customer token key \"\(key.kid)\""
                switch key.algorithm {
                case .HS256:
                    let values = try required(key.secretVariable ?? "", keyName)
                    customerTokenKeys[publisher.id, default: []].append(.init(kid: key.kid, verification: .hmac(values)))
                case .ES256:
                    guard let pem = key.publicKey, let publicKey = try? P256.Signing.PublicKey(pemRepresentation: pem) else {
                        throw APIConfigurationError("\(keyName): publicKey is not a P-256 public key in PEM form")
                    }
                    customerTokenKeys[publisher.id, default: []].append(.init(kid: key.kid, verification: .es256(publicKey)))
                }
            }
        }
        do {
            for token in try secrets.secrets("ENTITLE_ADMIN_TOKEN") { bearers.append((.admin, digest(token))) }
        } catch {
            throw APIConfigurationError(error.problem)
        }
        self.bearers = bearers
        self.cleengBasic = cleengBasic
        self.customerTokenKeys = customerTokenKeys
        self.sharedSecrets = sharedSecrets
    }

    /// Whose this Bearer key is. Every candidate is compared (in constant time), whatever matched.
    func holder(bearer token: String) -> Holder? {
        let presented = SHA256.hash(data: Array(token.utf8))
        var found: Holder?
        for candidate in bearers where ConstantTime.equal(candidate.digest, presented) && found == nil { found = candidate.holder }
        return found
    }

    /// The publisher whose secret key (`X-Publisher-Token`) and Cleeng Basic credentials
    /// (`user:password`) these are.
    func publisher(cleengToken: String, basicCredentials: String) -> String? {
        let basic = SHA256.hash(data: Array(basicCredentials.utf8))
        guard case .secretKey(let id)? = holder(bearer: cleengToken), let expected = cleengBasic[id] else { return nil }
        var matched = false
        for candidate in expected where ConstantTime.equal(candidate, basic) { matched = true }
        return matched ? id : nil
    }

    var hasAdminToken: Bool { bearers.contains { $0.holder == .admin } }

    package var description: String { "APICredentials(\(bearers.count) keys, <redacted>)" }
    package var debugDescription: String { description }
    package var customMirror: Mirror { Mirror(self, children: []) }
}

/// The API cannot start: the message names what to fix.
package struct APIConfigurationError: Error, Sendable, CustomStringConvertible {
    package let message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}
