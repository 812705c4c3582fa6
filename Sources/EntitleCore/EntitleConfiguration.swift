import APNs
import AppStore
import AsyncHTTPClient
import Crypto
import Entitlements
import Foundation
import Logging
import NIOCore
import X509

/// A deployment's configuration: the catalog, where Apple is, whom to trust, and the
/// secrets, taken from the environment by the names the catalog gives.
///
/// - `ENTITLE_ENV=development`: every Apple URL points at the simulator at
///   `ENTITLE_SIMULATOR_URL` (default `http://127.0.0.1:8081`), whose roots are trusted, whose
///   clock is followed, whose demo shared secrets fill secrets left unset, and with which a
///   fresh In-App Purchase key is registered for every app without one. No other
///   configuration trusts a simulator.
/// - otherwise (production): Apple's URLs and roots; every secret the catalog names must be set.
///
/// Secrets are read through `SecretReader` (a variable, or the file `VARIABLE_FILE` names);
/// the webhook secrets and APNs keys are read again by `reloadSecrets()` (SIGHUP), for rotation.
package struct EntitleConfiguration: Sendable {
    package enum Mode: Sendable, Hashable {
        case development(simulatorURL: String)
        case production
    }

    package let mode: Mode
    package let catalog: EntitlementCatalog
    /// Keyed by publisher id, then bundle id.
    package let gateways: [String: [String: AppleGateway]]
    package let clock: AppleClock
    /// Publisher id -> the webhook's HMAC secrets (one while stable, two during a rotation:
    /// each delivery is signed with every one).
    package let webhookSecrets: Reloadable<[String: [Secret]]>
    /// Where secrets are read.
    package let secrets: SecretReader
    /// Development: the simulator's shared secret per bundle id, for apps whose variable is unset.
    let simulatorSharedSecrets: [String: Secret]
    /// Whether webhooks may be delivered to loopback, private, link-local and metadata
    /// addresses: in development, or with `ENTITLE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=1`.
    package let webhooksMayReachPrivateAddresses: Bool
    /// How long after a subscription's expiry its renewal check runs.
    package var renewalCheckMargin: Duration
    /// How often a subscription in billing retry is checked.
    package var billingRetryCheckInterval: Duration
    /// How soon Apple is asked again about a purchase granted provisionally (then the
    /// renewal check's own back-off while Apple stays unreachable).
    package var provisionalCheckDelay: Duration = .seconds(60)
    /// Publisher id -> its APNs client (publishers whose catalog entry has `push`).
    package var pushClients: [String: APNsClient] = [:]
    /// How customers' documents are written (`ENTITLE_CUSTOMER_FORMAT`: `deflated`, the
    /// default, or `json` while older versions still run); both are always read.
    package var customerFormat: StoredCustomer.Format = .deflated
    /// How the event log's entries are written (`ENTITLE_EVENT_FORMAT`: `deflated`, the
    /// default, or `compact` or `long` while older versions still run; unset, `long` with
    /// `ENTITLE_CUSTOMER_FORMAT=json`); every form is always read.
    package var eventFormat: EventLog.Format = .deflated
    /// Where Apple's word on purchases nobody holds is kept (`ENTITLE_UNHELD_KEY`: `tagged`,
    /// the default, or `legacy` while versions before 2026-11-28 still run); both are read.
    package var unheldKey: EntitlementStore.UnheldKey = .tagged
    /// Verifies app receipts where they arrive, to refuse another app's at once: Apple's
    /// receipt root, and in development the simulator's beside it.
    package var appReceipts = AppReceiptVerifier()

    package func gateway(publisher: String, bundleId: String) -> AppleGateway? { gateways[publisher]?[bundleId] }

    /// The app's shared secrets as they are now (read again from their file, for rotation);
    /// V1 notifications carry one of them as `password`.
    package func sharedSecrets(publisher: String, bundleId: String) throws(SecretError) -> [Secret] {
        guard let app = catalog.publisher(publisher)?.app(bundleId: bundleId), let variable = app.sharedSecretVariable else { return [] }
        let values = try secrets.secrets(variable)
        return values.isEmpty ? simulatorSharedSecrets[bundleId].map { [$0] } ?? [] : values
    }

    /// Reads the secrets that can change while running (webhook secrets, APNs keys) again.
    package func reloadSecrets() throws {
        try webhookSecrets.reload()
        for publisher in catalog.publishers {
            guard let key = publisher.push?.key, let client = pushClients[publisher.id] else { continue }
            guard let pem = try secrets.secret(key.privateKeyVariable) else {
                throw WorkerError(.invalidConfiguration, "publisher \"\(publisher.id)\" push: \(key.privateKeyVariable) is not set")
            }
            do {
                try client.providerToken.rotate(privateKeyPEM: pem.value)
            } catch {
                throw WorkerError(.invalidConfiguration, "publisher \"\(publisher.id)\" push: \(error.message)")
            }
        }
    }

    /// Every publisher's webhook secrets, each required.
    static func readWebhookSecrets(_ catalog: EntitlementCatalog, _ secrets: SecretReader) throws(SecretError) -> [String: [Secret]] {
        var result: [String: [Secret]] = [:]
        for publisher in catalog.publishers {
            guard let webhook = publisher.webhook else { continue }
            result[publisher.id] = try secrets.required(webhook.secretVariable, for: "publisher \"\(publisher.id)\" webhook")
        }
        return result
    }
    /// Reads the catalog at `catalogPath` and the environment.
    package static func load(
        catalogPath: String, environment: [String: String], httpClient: HTTPClient = .shared, logger: Logger
    ) async throws -> EntitleConfiguration {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: catalogPath))
        } catch {
            throw WorkerError(.invalidConfiguration, "the catalog \(catalogPath) cannot be read: \(error.localizedDescription)")
        }
        let catalog: EntitlementCatalog
        do {
            catalog = try EntitlementCatalog(json: data)
        } catch {
            throw WorkerError(.invalidConfiguration, "the catalog \(catalogPath) is wrong: \(error)")
        }
        let mode: Mode
        switch environment["ENTITLE_ENV"] ?? "production" {
        case "development":
            let url = environment["ENTITLE_SIMULATOR_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://127.0.0.1:8081"
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
                throw WorkerError(.invalidConfiguration, "ENTITLE_SIMULATOR_URL \(url) is not an http(s) URL")
            }
            mode = .development(simulatorURL: url.hasSuffix("/") ? String(url.dropLast()) : url)
        case "production", "":
            mode = .production
        case let other:
            throw WorkerError(.invalidConfiguration, "ENTITLE_ENV must be development or production, not \(other)")
        }
        do {
            return try await Loader(mode: mode, environment: environment, httpClient: httpClient, logger: logger).load(catalog)
        } catch let error as SecretError {
            throw WorkerError(.invalidConfiguration, error.problem)
        }
    }

    private struct Loader {
        let mode: Mode
        let environment: [String: String]
        let httpClient: HTTPClient
        let logger: Logger

        func load(_ catalog: EntitlementCatalog) async throws -> EntitleConfiguration {
            var signedRoots = AppleRootCertificates.signedDataRoots
            var simulatorSecrets: [String: Secret] = [:]
            var receiptRoots = AppleRootCertificates.receiptRoots
            if let bootstrap {
                signedRoots = [try await bootstrap.signingRoot()]
                receiptRoots.append(try await bootstrap.receiptRoot())
                simulatorSecrets = try await bootstrap.sharedSecrets()
            }
            var gateways: [String: [String: AppleGateway]] = [:]
            for publisher in catalog.publishers {
                for app in publisher.apps {
                    let name = "publisher \"\(publisher.id)\" app \"\(app.bundleId)\""
                    let secret = try app.sharedSecretVariable.flatMap { variable in
                        try secrets.secrets(variable).first ?? simulatorSecrets[app.bundleId] ?? missing(variable, for: name)
                    }
                    var verifierConfiguration = SignedDataVerifier.Configuration(
                        bundleId: app.bundleId, appAppleId: app.appAppleId, roots: signedRoots)
                    verifierConfiguration.validationTime = .signedDate
                    // An app sold in one environment only refuses data from the other at once.
                    verifierConfiguration.environment =
                        switch Set(app.environments) {
                        case ["Production"]: .production
                        case ["Sandbox"]: .sandbox
                        default: nil
                        }
                    var receipts = VerifyReceiptClient.Configuration(sharedSecret: secret?.value)
                    if case .development(let url) = mode {
                        receipts.productionURL = url + "/verifyReceipt"
                        receipts.sandboxURL = url + "/sandbox/verifyReceipt"
                    }
                    let (production, sandbox) = try await serverAPIClients(app, name: name)
                    gateways[publisher.id, default: [:]][app.bundleId] = AppleGateway(
                        app: app, signedData: SignedDataVerifier(configuration: verifierConfiguration),
                        receipts: VerifyReceiptClient(configuration: receipts, httpClient: httpClient), sharedSecret: secret,
                        production: production, sandbox: sandbox)
                }
            }
            let reader = secrets
            let webhookSecrets = try Reloadable { try EntitleConfiguration.readWebhookSecrets(catalog, reader) }
            let development: Bool
            let clock: AppleClock
            if case .development(let url) = mode {
                development = true
                // A load run against a simulator whose clock nobody advances reads no clock, as
                // production does not.
                switch environment["ENTITLE_APPLE_CLOCK"] ?? "simulator" {
                case "simulator", "": clock = AppleClock(simulatorURL: url, httpClient: httpClient)
                case "wall": clock = .wall
                case let other: throw WorkerError(.invalidConfiguration, "ENTITLE_APPLE_CLOCK must be simulator or wall, not \(other)")
                }
            } else {
                development = false
                clock = .wall
            }
            var pushClients: [String: APNsClient] = [:]
            for publisher in catalog.publishers {
                guard let push = publisher.push else { continue }
                pushClients[publisher.id] = try await pushClient(publisher, push)
            }
            var configuration = EntitleConfiguration(
                mode: mode, catalog: catalog, gateways: gateways, clock: clock, webhookSecrets: webhookSecrets, secrets: reader,
                simulatorSharedSecrets: simulatorSecrets,
                webhooksMayReachPrivateAddresses: development || environment["ENTITLE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES"] == "1",
                renewalCheckMargin: development ? .seconds(5) : .seconds(3600),
                billingRetryCheckInterval: development ? .seconds(60) : .seconds(6 * 3600),
                provisionalCheckDelay: development ? .seconds(2) : .seconds(60))
            configuration.pushClients = pushClients
            configuration.appReceipts = AppReceiptVerifier(configuration: .init(roots: receiptRoots))
            switch environment["ENTITLE_CUSTOMER_FORMAT"] ?? "" {
            case "", "deflated": configuration.customerFormat = .deflated
            case "json": configuration.customerFormat = .json
            case let other: throw WorkerError(.invalidConfiguration, "ENTITLE_CUSTOMER_FORMAT must be deflated or json, not \(other)")
            }
            switch environment["ENTITLE_EVENT_FORMAT"] ?? "" {
            case "": configuration.eventFormat = configuration.customerFormat == .json ? .long : .deflated
            case let name:
                guard let format = EventLog.Format(rawValue: name) else {
                    throw WorkerError(.invalidConfiguration, "ENTITLE_EVENT_FORMAT must be deflated, compact or long, not \(name)")
                }
                configuration.eventFormat = format
            }
            switch environment["ENTITLE_UNHELD_KEY"] ?? "" {
            case "": configuration.unheldKey = .tagged
            case let name:
                guard let key = EntitlementStore.UnheldKey(rawValue: name) else {
                    throw WorkerError(.invalidConfiguration, "ENTITLE_UNHELD_KEY must be tagged or legacy, not \(name)")
                }
                configuration.unheldKey = key
            }
            return configuration
        }

        /// The publisher's APNs client: its key from the catalog's variable, Apple's hosts
        /// (or `ENTITLE_APNS_URL`, `ENTITLE_APNS_SANDBOX_URL`); in development without a key,
        /// a key of the run's own registered with the local APNs, which serves both.
        func pushClient(_ publisher: Publisher, _ push: Publisher.Push) async throws -> APNsClient {
            let name = "publisher \"\(publisher.id)\" push"
            var configuration = APNsClient.Configuration()
            let token: APNsProviderToken
            var authority: String?
            if case .development = mode, let bootstrap {
                let local = try await bootstrap.localAPNs()
                configuration.productionURL = local.url
                configuration.sandboxURL = local.url
                authority = local.certificateAuthority
            } else {
                configuration.productionURL = try apiHost("ENTITLE_APNS_URL") ?? configuration.productionURL
                configuration.sandboxURL = try apiHost("ENTITLE_APNS_SANDBOX_URL") ?? configuration.sandboxURL
            }
            do {
                if let key = push.key {
                    let pem = try secrets.secret(key.privateKeyVariable) ?? missing(key.privateKeyVariable, for: name)
                    token = try APNsProviderToken(keyId: key.keyId, teamId: key.teamId, privateKeyPEM: pem.value)
                } else if let bootstrap {
                    let registered = try await bootstrap.registerAPNsKey(topics: publisher.apps.map(\.bundleId))
                    token = try APNsProviderToken(keyId: registered.keyId, teamId: registered.teamId, privateKeyPEM: registered.pem)
                } else {
                    throw WorkerError(.invalidConfiguration, "\(name): key (keyId, teamId, privateKeyVariable) is required in production")
                }
                return APNsClient(
                    configuration: configuration, providerToken: token,
                    httpClient: try APNsClient.httpClient(owner: publisher.id + "/" + token.keyId, trusting: authority))
            } catch let error as APNsError {
                throw WorkerError(.invalidConfiguration, "\(name): \(error.message)")
            }
        }

        var secrets: SecretReader { SecretReader(environment: environment) }

        /// The simulator's side of development mode; `nil` in production, which never calls it.
        var bootstrap: DevelopmentBootstrap? {
            guard case .development(let url) = mode else { return nil }
            return DevelopmentBootstrap(simulatorURL: url, httpClient: httpClient)
        }

        /// An App Store Server API base URL an operator set (Apple's earlier hosts, a proxy):
        /// https, no path; `nil` when the variable is unset.
        func apiHost(_ variable: String) throws -> String? {
            guard let text = environment[variable], !text.isEmpty else { return nil }
            let url = text.hasSuffix("/") ? String(text.dropLast()) : text
            guard let parsed = URL(string: url), parsed.scheme == "https", parsed.host != nil, parsed.path.isEmpty, parsed.query == nil
            else { throw WorkerError(.invalidConfiguration, "\(variable) \(text) is not an https URL without a path") }
            return url
        }

        func missing(_ variable: String, for name: String) throws -> Secret {
            throw WorkerError(.invalidConfiguration, "\(name): the environment variable \(variable) is not set")
        }

        func serverAPIClients(_ app: Publisher.App, name: String) async throws -> (AppStoreServerAPIClient?, AppStoreServerAPIClient?) {
            let keyId: String
            let issuerId: String
            let pem: String
            if let key = app.apiKey {
                let text = try secrets.secret(key.privateKeyVariable) ?? missing(key.privateKeyVariable, for: name)
                (keyId, issuerId, pem) = (key.keyId, key.issuerId, text.value)
            } else if let bootstrap {
                (keyId, issuerId, pem) = try await bootstrap.registerKey(bundleId: app.bundleId)
            } else {
                return (nil, nil)
            }
            func client(_ environment: AppStoreEnvironment) throws -> AppStoreServerAPIClient {
                var configuration = AppStoreServerAPIClient.Configuration(
                    keyId: keyId, issuerId: issuerId, bundleId: app.bundleId, environment: environment)
                if case .development(let url) = mode {
                    configuration.productionURL = url
                    configuration.sandboxURL = url + "/sandbox"
                } else {
                    configuration.productionURL = try apiHost("ENTITLE_APPSTORE_API_URL") ?? configuration.productionURL
                    configuration.sandboxURL = try apiHost("ENTITLE_APPSTORE_SANDBOX_API_URL") ?? configuration.sandboxURL
                }
                do {
                    return try AppStoreServerAPIClient(configuration: configuration, privateKeyPEM: pem, httpClient: httpClient)
                } catch {
                    throw WorkerError(.invalidConfiguration, "\(name): \(error.message)")
                }
            }
            return (
                app.environments.contains("Production") ? try client(.production) : nil,
                app.environments.contains("Sandbox") ? try client(.sandbox) : nil
            )
        }
    }
}
