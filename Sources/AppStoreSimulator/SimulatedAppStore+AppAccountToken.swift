import AppStore
import Foundation

/// The App Store Server API's newer transaction endpoints: Set App Account Token (1.16),
/// Get App Transaction Info (1.17) and Finish Transaction (1.20), with Apple's errors.
extension SimulatedAppStore {
    /// Set App Account Token: the token applies to the purchase's current transaction and
    /// what follows (a subscription's renewals), never to past ones.
    public func setAppAccountToken(
        _ originalTransactionId: String, environment: AppStoreEnvironment, bundleId: String, _ request: UpdateAppAccountTokenRequest
    ) async throws(AppleAPIError) {
        try? await processDue()
        guard !originalTransactionId.isEmpty, originalTransactionId.allSatisfy(\.isNumber) else { throw .invalidTransactionId }
        guard let token = UUID(uuidString: request.appAccountToken)?.uuidString.lowercased() else {
            throw .badRequest(
                AppleErrorCode.invalidAppAccountTokenUUID, "Invalid request. The app account token field must be a valid UUID.")
        }
        let record: SimulatedTransaction
        do {
            record = try scoped(originalTransactionId, environment, bundleId)
        } catch {
            throw .originalTransactionIdNotFound
        }
        guard record.transaction.originalTransactionId == record.id else {
            throw .badRequest(
                AppleErrorCode.transactionIdIsNotOriginalTransactionId,
                "Invalid request. The transaction ID provided is not an original transaction ID.")
        }
        guard record.transaction.inAppOwnershipType != .familyShared else {
            throw .badRequest(
                AppleErrorCode.familyTransactionNotSupported,
                "Invalid request. Family Sharing transactions aren't supported by this endpoint.")
        }
        var latest = record
        if var subscription = subscriptions[originalTransactionId] {
            subscription.appAccountToken = token
            save(subscription)
            latest = transactions[subscription.latestTransactionId] ?? record
        }
        latest.transaction.appAccountToken = token
        store(latest)
    }

    /// Get App Transaction Info: the signed app transaction of the account that made the
    /// transaction (any of its ids), for the app of the caller's key.
    public func appTransactionInfo(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String
    ) async throws(AppleAPIError) -> AppTransactionInfoResponse {
        let record = try scoped(transactionId, environment, bundleId)
        var response = AppTransactionInfoResponse()
        do {
            response.signedAppTransactionInfo = try signedAppTransaction(of: record)
        } catch {
            throw .generalInternal
        }
        return response
    }

    /// The signed app transaction of the account that made `record`, for its app and
    /// environment (Get App Transaction Info and `RESCIND_CONSENT`'s `appData` share it).
    func signedAppTransaction(of record: SimulatedTransaction) throws -> String {
        let bundleId = record.transaction.bundleId ?? ""
        let environment = record.environment
        let first = accountHistory(of: record).compactMap(\.transaction.purchaseDate).min()
        let app = catalog.app(bundleId)
        var appTransaction = AppTransaction()
        appTransaction.receiptType = environment
        appTransaction.appAppleId = environment == .production ? app?.appAppleId : nil
        appTransaction.bundleId = bundleId
        appTransaction.applicationVersion = app?.bundleVersion ?? "1"
        appTransaction.originalApplicationVersion = appTransaction.applicationVersion
        appTransaction.originalPurchaseDate = first
        appTransaction.receiptCreationDate = AppleTimestamp(clock.now)
        appTransaction.originalPlatform = "iOS"
        appTransaction.appTransactionId = Self.appTransactionId(account: record.account, bundleId: bundleId)
        appTransaction.signedDate = AppleTimestamp(clock.now)
        return try signing.sign(appTransaction)
    }

    /// The account's app transaction id for an app: one per account and app, stable (Apple:
    /// it survives redownloads, refunds and storefront changes).
    static func appTransactionId(account: String, bundleId: String) -> String {
        let digest = (account + "/" + bundleId).utf8.reduce(UInt64(5381)) { $0 &* 33 &+ UInt64($1) }
        return "70" + String(digest % 1_000_000_000_000_000)
    }

    /// Finish Transaction: recorded on the transaction (`finishedDate` in its snapshot).
    public func finishTransaction(_ transactionId: String, environment: AppStoreEnvironment, bundleId: String) async throws(AppleAPIError) {
        var record = try scoped(transactionId, environment, bundleId)
        record.finishedAt = record.finishedAt ?? clock.now
        store(record)
    }
}
