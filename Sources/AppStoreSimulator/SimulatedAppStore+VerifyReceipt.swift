import AppStore
import DurationUnits
import Foundation

/// verifyReceipt and V1 notifications: the legacy road, in Apple's JSON (every number a
/// string, dates three ways).
extension SimulatedAppStore {
    /// Answers a verifyReceipt request body as Apple's endpoint would; `sandbox` says which
    /// of Apple's two hosts was called.
    public func verifyReceipt(body: [UInt8], sandbox: Bool) async -> [UInt8] {
        func answer(_ object: [String: Any]) -> [UInt8] {
            (try? Array(JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))) ?? Array(#"{"status":21009}"#.utf8)
        }
        let endpoint = sandbox ? "Sandbox" : "Production"
        guard let request = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
            let receiptData = request["receipt-data"] as? String
        else { return answer(["status": 21002, "environment": endpoint]) }
        try? await processDue()

        let receipt: AppReceipt
        do {
            receipt = try await AppReceiptVerifier(configuration: .init(roots: [receiptSigning.root])).verify(base64: receiptData)
        } catch {
            return answer(["status": error.code == .invalidFormat ? 21002 : 21003, "environment": endpoint])
        }
        let environment = receipt.environment ?? .sandbox
        if environment == .sandbox && !sandbox { return answer(["status": 21007, "environment": "Production"]) }
        if environment == .production && sandbox { return answer(["status": 21008, "environment": "Sandbox"]) }
        guard let bundleId = receipt.bundleId, let app = catalog.app(bundleId) else {
            return answer(["status": 21010, "environment": endpoint])
        }
        let account = account(ofReceipt: receipt)
        let owned = account.map { receiptTransactions(account: $0, bundleId: bundleId, environment: environment) } ?? []
        let hasSubscriptions = owned.contains { $0.transaction.type == .autoRenewable }
        let password = request["password"] as? String
        if let secret = app.sharedSecret, password != nil || hasSubscriptions {
            guard let password, SimulatorSecrets.equal(password, secret) else { return answer(["status": 21004, "environment": endpoint]) }
        }

        var response: [String: Any] = ["status": 0, "environment": environment == .production ? "Production" : "Sandbox"]
        var receiptObject: [String: Any] = [
            "receipt_type": receipt.receiptType ?? "ProductionSandbox", "bundle_id": bundleId,
            "application_version": receipt.applicationVersion ?? "1",
            "original_application_version": receipt.originalApplicationVersion ?? "1",
            "adam_id": receipt.appItemId ?? 0, "app_item_id": receipt.appItemId ?? 0, "download_id": 0, "version_external_identifier": 0,
            "in_app": receipt.inAppPurchases.compactMap {
                $0.transactionId.flatMap { transactions[$0] }.map(Self.verifyReceiptTransaction)
            },
        ]
        receiptObject.merge(Self.dates("receipt_creation_date", receipt.creationDate), uniquingKeysWith: { $1 })
        receiptObject.merge(Self.dates("request_date", AppleTimestamp(clock.now)), uniquingKeysWith: { $1 })
        receiptObject.merge(Self.dates("original_purchase_date", receipt.creationDate), uniquingKeysWith: { $1 })
        response["receipt"] = receiptObject
        if let account, hasSubscriptions {
            let unified =
                (try? unifiedReceipt(
                    account: account, bundleId: bundleId, environment: environment,
                    excludeOld: request["exclude-old-transactions"] as? Bool ?? false)) ?? [:]
            for key in ["latest_receipt", "latest_receipt_info", "pending_renewal_info"] { response[key] = unified[key] }
        }
        return answer(response)
    }

    /// `latest_receipt`, `latest_receipt_info` (newest first) and `pending_renewal_info` for
    /// an account: what verifyReceipt and V1 notifications carry.
    func unifiedReceipt(
        account: String, bundleId: String, environment: AppStoreEnvironment, excludeOld: Bool = false
    ) throws
        -> [String: Any]
    {
        var latest = receiptTransactions(account: account, bundleId: bundleId, environment: environment)
            .sorted { ($0.transaction.purchaseDate ?? .init(milliseconds: 0)) > ($1.transaction.purchaseDate ?? .init(milliseconds: 0)) }
        if excludeOld {
            var seen = Set<String>()
            latest = latest.filter { seen.insert($0.transaction.originalTransactionId ?? $0.id).inserted }
        }
        let pending = subscriptions(of: account).filter { $0.bundleId == bundleId && $0.environment == environment }
            .map { subscription -> [String: Any] in
                let info = renewalInfo(subscription)
                var object: [String: Any] = [
                    "auto_renew_product_id": subscription.autoRenewProductId, "product_id": subscription.productId,
                    "original_transaction_id": subscription.originalTransactionId, "auto_renew_status": subscription.autoRenew ? "1" : "0",
                ]
                if let intent = info.expirationIntent { object["expiration_intent"] = String(intent.rawValue) }
                if subscription.state == .gracePeriod || subscription.state == .billingRetry || subscription.state == .expired {
                    object["is_in_billing_retry_period"] = info.isInBillingRetryPeriod == true ? "1" : "0"
                }
                object.merge(Self.dates("grace_period_expires_date", info.gracePeriodExpiresDate), uniquingKeysWith: { $1 })
                if let status = info.priceIncreaseStatus { object["price_consent_status"] = String(status.rawValue) }
                if let code = subscription.offer?.identifier { object["offer_code_ref_name"] = code }
                return object
            }
        return [
            "latest_receipt": try appReceipt(account: account, bundleId: bundleId, environment: environment),
            "latest_receipt_info": latest.map(Self.verifyReceiptTransaction), "pending_renewal_info": pending,
        ]
    }

    /// A V1 (`responseBodyV1`) notification about `record`.
    func v1Notification(type: String, record: SimulatedTransaction) throws -> [UInt8] {
        let bundleId = record.transaction.bundleId ?? ""
        let app = catalog.app(bundleId)
        var unified = try unifiedReceipt(account: record.account, bundleId: bundleId, environment: record.environment)
        unified["environment"] = record.environment == .production ? "Production" : "Sandbox"
        unified["status"] = 0
        var body: [String: Any] = [
            "notification_type": type, "environment": record.environment == .production ? "PROD" : "Sandbox", "bid": bundleId,
            "bvrs": app?.bundleVersion ?? "1", "unified_receipt": unified,
            "original_transaction_id": record.transaction.originalTransactionId ?? record.id,
        ]
        if let secret = app?.sharedSecret { body["password"] = secret }
        if let subscription = subscriptions[record.transaction.originalTransactionId ?? ""] {
            body["auto_renew_status"] = subscription.autoRenew ? "true" : "false"
            body["auto_renew_product_id"] = subscription.autoRenewProductId
            body.merge(Self.dates("auto_renew_status_change_date", AppleTimestamp(clock.now)), uniquingKeysWith: { $1 })
        }
        return Array(try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]))
    }

    static func verifyReceiptTransaction(_ record: SimulatedTransaction) -> [String: Any] {
        let transaction = record.transaction
        var object: [String: Any] = [
            "quantity": String(transaction.quantity ?? 1), "product_id": transaction.productId ?? "",
            "transaction_id": record.id, "original_transaction_id": transaction.originalTransactionId ?? record.id,
            "in_app_ownership_type": transaction.inAppOwnershipType?.rawValue ?? "PURCHASED",
        ]
        object.merge(dates("purchase_date", transaction.purchaseDate), uniquingKeysWith: { $1 })
        object.merge(dates("original_purchase_date", transaction.originalPurchaseDate), uniquingKeysWith: { $1 })
        object.merge(dates("expires_date", transaction.expiresDate), uniquingKeysWith: { $1 })
        object.merge(dates("cancellation_date", transaction.revocationDate), uniquingKeysWith: { $1 })
        if let reason = transaction.revocationReason { object["cancellation_reason"] = String(reason.rawValue) }
        if transaction.type == .autoRenewable {
            object["web_order_line_item_id"] = transaction.webOrderLineItemId ?? ""
            object["is_trial_period"] = record.isTrialPeriod ? "true" : "false"
            object["is_in_intro_offer_period"] = record.isInIntroOfferPeriod ? "true" : "false"
            object["subscription_group_identifier"] = transaction.subscriptionGroupIdentifier ?? ""
            if transaction.isUpgraded == true { object["is_upgraded"] = "true" }
            if transaction.offerType == .offerCode, let code = transaction.offerIdentifier { object["offer_code_ref_name"] = code }
        } else {
            object["is_trial_period"] = "false"
        }
        if let token = transaction.appAccountToken { object["app_account_token"] = token }
        return object
    }

    /// Apple's three forms of a date: `<key>` (`2023-10-19 01:18:54 Etc/GMT`), `<key>_ms`,
    /// `<key>_pst`.
    static func dates(_ key: String, _ timestamp: AppleTimestamp?) -> [String: Any] {
        guard let timestamp else { return [:] }
        return [
            key: format(timestamp.date, zone: "Etc/GMT"), key + "_ms": String(timestamp.milliseconds),
            key + "_pst": format(timestamp.date, zone: "America/Los_Angeles"),
        ]
    }

    private static func format(_ date: Date, zone: String) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: zone)
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: date) + " " + zone
    }
}
