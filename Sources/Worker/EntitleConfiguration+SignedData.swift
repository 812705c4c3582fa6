import AppStore
import Entitlements

extension EntitleConfiguration {
    /// Verifies a signed transaction with the verifier of whichever of the publisher's apps
    /// it is for (a JWS names its app only once verified).
    public func verifyTransaction(_ jws: String, publisher: Publisher) async throws(AppStoreError) -> JWSTransaction {
        var lastError = AppStoreError(.invalidAppIdentifier, "publisher \(publisher.id) has no app")
        for app in publisher.apps {
            guard let gateway = gateway(publisher: publisher.id, bundleId: app.bundleId) else { continue }
            do {
                return try await gateway.signedData.verifyTransaction(jws)
            } catch  where error.code == .invalidAppIdentifier {
                lastError = AppStoreError(.invalidAppIdentifier, "the transaction is for an app \(publisher.id) does not have")
            }
        }
        throw lastError
    }

    /// Verifies a V2 notification's signed payload with the verifier of the publisher's app it is for.
    public func verifyNotification(_ signedPayload: String, publisher: Publisher) async throws(AppStoreError) -> NotificationPayload {
        var lastError = AppStoreError(.invalidAppIdentifier, "publisher \(publisher.id) has no app")
        for app in publisher.apps {
            guard let gateway = gateway(publisher: publisher.id, bundleId: app.bundleId) else { continue }
            do {
                return try await gateway.signedData.verifyNotification(signedPayload)
            } catch  where error.code == .invalidAppIdentifier {
                lastError = AppStoreError(.invalidAppIdentifier, "the notification is for an app \(publisher.id) does not have")
            }
        }
        throw lastError
    }
}
