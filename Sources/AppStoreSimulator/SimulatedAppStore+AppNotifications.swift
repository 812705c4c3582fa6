import AppStore
import Foundation

/// Notifications about an app rather than a purchase: `RESCIND_CONSENT` (with `appData`)
/// and `EXTERNAL_PURCHASE_TOKEN` (with `externalPurchaseToken`). Apple: "The data, appData,
/// summary, and externalPurchaseToken fields are mutually exclusive."
extension SimulatedAppStore {
    /// A parent or guardian withdraws consent for the app of the account that made
    /// `transactionId`: `RESCIND_CONSENT`, no subtype, `appData` carrying that account's
    /// signed app transaction (Notifications, 2025-11-04).
    public func rescindConsent(_ transactionId: String) async throws -> TransactionSnapshot {
        let record = try transaction(transactionId)
        let bundleId = record.transaction.bundleId ?? ""
        var appData = AppData()
        appData.environment = record.environment
        appData.appAppleId = catalog.app(bundleId)?.appAppleId
        appData.bundleId = bundleId
        appData.signedAppTransactionInfo = try signedAppTransaction(of: record)
        var payload = NotificationPayload()
        payload.notificationType = .rescindConsent
        payload.appData = appData
        let uuid = try await sendAppNotification(payload, bundleId: bundleId, environment: record.environment)
        return try transactionSnapshot(transactionId, notifications: [uuid])
    }

    /// An `EXTERNAL_PURCHASE_TOKEN` notification for an app. `CREATED` and
    /// `ACTIVE_TOKEN_REMINDER` are about custom link tokens, which carry `tokenType` and
    /// `tokenExpirationDate`; a reminder names the token it is about (`externalPurchaseId`).
    public func externalPurchaseToken(_ request: ExternalPurchaseTokenRequest) async throws -> ExternalPurchaseTokenResult {
        guard let app = catalog.app(request.bundleId) else {
            throw SimulatorError(.notFound, "no app \(request.bundleId)")
        }
        let subtype = NotificationSubtype(rawValue: request.subtype)
        guard [NotificationSubtype.created, .activeTokenReminder, .unreported].contains(subtype) else {
            throw SimulatorError(.invalidRequest, "subtype is CREATED, ACTIVE_TOKEN_REMINDER or UNREPORTED, not \(request.subtype)")
        }
        let environment = request.environment ?? .sandbox
        let customLink = subtype != .unreported || request.tokenType != nil
        let tokenType = request.tokenType ?? (customLink ? "SERVICES" : nil)
        guard tokenType == nil || ["SERVICES", "ACQUISITION"].contains(tokenType) else {
            throw SimulatorError(.invalidRequest, "tokenType is SERVICES or ACQUISITION")
        }
        let lifetime = request.validForDays ?? 30
        guard (1...3650).contains(lifetime) else { throw SimulatorError(.invalidRequest, "validForDays is 1 to 3650") }
        let prefix = environment == .sandbox ? "SANDBOX" : ""
        let id = request.externalPurchaseId ?? prefix + UUID().uuidString.lowercased()
        guard !id.isEmpty, id.count <= 128, id.hasPrefix("SANDBOX") == (environment == .sandbox) else {
            throw SimulatorError(.invalidRequest, "externalPurchaseId must start with SANDBOX exactly when the environment is Sandbox")
        }
        let now = clock.now
        var token = ExternalPurchaseToken()
        token.externalPurchaseId = id
        token.tokenCreationDate = AppleTimestamp(now)
        token.appAppleId = app.appAppleId
        token.bundleId = app.bundleId
        token.tokenType = tokenType
        token.tokenExpirationDate = tokenType == nil ? nil : AppleTimestamp(now.addingTimeInterval(Double(lifetime) * 86_400))
        var payload = NotificationPayload()
        payload.notificationType = .externalPurchaseToken
        payload.subtype = subtype
        payload.externalPurchaseToken = token
        let uuid = try await sendAppNotification(payload, bundleId: app.bundleId, environment: environment)
        return ExternalPurchaseTokenResult(externalPurchaseId: id, notificationUUID: uuid)
    }

    /// Signs and hands over a V2 notification that is about no transaction.
    private func sendAppNotification(
        _ payload: NotificationPayload, bundleId: String, environment: AppStoreEnvironment
    ) async throws -> String {
        var payload = payload
        let uuid = UUID().uuidString.lowercased()
        payload.notificationUUID = uuid
        payload.version = "2.0"
        payload.signedDate = AppleTimestamp(clock.now)
        await notifications.send(
            OutgoingNotification(
                uuid: uuid, type: payload.notificationType ?? .test, subtype: payload.subtype,
                signedPayload: try signing.sign(payload), v1Body: nil, transactionId: "", bundleId: bundleId,
                environment: environment, createdAt: clock.now))
        return uuid
    }
}
