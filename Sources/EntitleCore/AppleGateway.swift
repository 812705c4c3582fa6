import AppStore
import Entitlements

/// Everything that proves one app's purchases with Apple: its signed-data verifier, its
/// verifyReceipt client (with the app's shared secret) and, when the app has an In-App
/// Purchase key, an App Store Server API client per environment.
package struct AppleGateway: Sendable {
    package let app: Publisher.App
    package let signedData: SignedDataVerifier
    package let receipts: VerifyReceiptClient
    /// The shared secret verifyReceipt is called with (V1 notifications are checked against
    /// `EntitleConfiguration.sharedSecrets`, which follows rotations).
    package let sharedSecret: Secret?
    /// The App Store Server API clients, per environment the app is sold in (with a key).
    package let production: AppStoreServerAPIClient?
    package let sandbox: AppStoreServerAPIClient?

    package init(
        app: Publisher.App, signedData: SignedDataVerifier, receipts: VerifyReceiptClient, sharedSecret: Secret?,
        production: AppStoreServerAPIClient?, sandbox: AppStoreServerAPIClient?
    ) {
        self.app = app
        self.signedData = signedData
        self.receipts = receipts
        self.sharedSecret = sharedSecret
        self.production = production
        self.sandbox = sandbox
    }

    package var hasServerAPI: Bool { production != nil || sandbox != nil }

    /// The App Store Server API client for data of `environment`; for an unknown
    /// environment, production (which falls back to sandbox) when the app sells there.
    package func serverAPI(for environment: String?) -> AppStoreServerAPIClient? {
        switch environment {
        case "Sandbox": sandbox
        case "Production": production
        default: app.environments.contains("Production") ? production : sandbox
        }
    }
}
