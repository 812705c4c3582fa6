import AppStore
import Entitlements

extension EntitleConfiguration {
    /// Verifies a signed transaction with the verifier of whichever of the publisher's apps
    /// it is for (a JWS names its app only once verified).
    public func verifyTransaction(_ jws: String, publisher: Publisher) async throws(AppStoreError) -> JWSTransaction {
        try await withEachApp(of: publisher, what: "transaction") { verifier throws(AppStoreError) in
            try await verifier.verifyTransaction(jws)
        }
    }

    /// Verifies a V2 notification's signed payload with the verifier of the publisher's app it is for.
    public func verifyNotification(_ signedPayload: String, publisher: Publisher) async throws(AppStoreError) -> NotificationPayload {
        try await withEachApp(of: publisher, what: "notification") { verifier throws(AppStoreError) in
            try await verifier.verifyNotification(signedPayload)
        }
    }

    /// The first app whose verifier accepts the data; "wrong app" only when none does.
    private func withEachApp<Result>(
        of publisher: Publisher, what: String, _ verify: (SignedDataVerifier) async throws(AppStoreError) -> Result
    ) async throws(AppStoreError) -> Result {
        var lastError = AppStoreError(.invalidAppIdentifier, "publisher \(publisher.id) has no app")
        for app in publisher.apps {
            guard let gateway = gateway(publisher: publisher.id, bundleId: app.bundleId) else { continue }
            do {
                return try await verify(gateway.signedData)
            } catch  where error.code == .invalidAppIdentifier {
                lastError = AppStoreError(.invalidAppIdentifier, "the \(what) is for an app \(publisher.id) does not have")
            }
        }
        throw lastError
    }
}
