import AppStore
import Entitlements

extension EntitleConfiguration {
    /// Verifies a signed transaction with the verifier of whichever of the publisher's apps
    /// it is for (a JWS names its app only once verified).
    package func verifyTransaction(_ jws: String, publisher: Publisher) async throws(AppStoreError) -> JWSTransaction {
        try await verified(publisher: publisher, what: "transaction") { verifier throws(AppStoreError) in
            try await verifier.verifyTransaction(jws)
        }.value
    }

    /// Verifies a V2 notification's signed payload with the verifier of the publisher's app it is for.
    package func verifyNotification(_ signedPayload: String, publisher: Publisher) async throws(AppStoreError) -> NotificationPayload {
        try await verified(publisher: publisher, what: "notification") { verifier throws(AppStoreError) in
            try await verifier.verifyNotification(signedPayload)
        }.value
    }

    /// The first of the publisher's apps whose verifier accepts the data, with that app's
    /// gateway; "wrong app" only when none does, any other refusal at once.
    package func verified<Value>(
        publisher: Publisher, what: String, _ verify: (SignedDataVerifier) async throws(AppStoreError) -> Value
    ) async throws(AppStoreError) -> (value: Value, gateway: AppleGateway) {
        var lastError = AppStoreError(.invalidAppIdentifier, "publisher \(publisher.id) has no app")
        for app in publisher.apps {
            guard let gateway = gateway(publisher: publisher.id, bundleId: app.bundleId) else { continue }
            do {
                return (try await verify(gateway.signedData), gateway)
            } catch  where error.code == .invalidAppIdentifier {
                lastError = AppStoreError(.invalidAppIdentifier, "the \(what) is for an app \(publisher.id) does not have")
            }
        }
        throw lastError
    }
}
