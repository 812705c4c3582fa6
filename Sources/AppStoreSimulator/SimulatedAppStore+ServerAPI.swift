import AppStore
import Foundation

/// The data behind the App Store Server API endpoints. Each call is scoped as Apple scopes
/// it: to the environment of the host called and the bundle id of the caller's key; a
/// transaction outside that scope is "not found".
extension SimulatedAppStore {
    static let pageSize = 20

    func scoped(
        _ transactionId: String, _ environment: AppStoreEnvironment, _ bundleId: String
    ) throws(AppleAPIError)
        -> SimulatedTransaction
    {
        guard !transactionId.isEmpty, transactionId.allSatisfy(\.isNumber) else { throw .invalidTransactionId }
        guard let record = transactions[transactionId], record.environment == environment, record.transaction.bundleId == bundleId
        else { throw .transactionIdNotFound }
        return record
    }

    func sign(_ id: String) throws(AppleAPIError) -> String {
        do { return try signedTransaction(id) } catch { throw .generalInternal }
    }

    /// Every transaction of the account that made `record`, for the same app and environment.
    func accountHistory(of record: SimulatedTransaction) -> [SimulatedTransaction] {
        (accountTransactions[record.account] ?? []).compactMap { transactions[$0] }.filter {
            $0.environment == record.environment && $0.transaction.bundleId == record.transaction.bundleId
        }
    }

    /// Get Transaction Info.
    public func transactionInfo(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String
    ) async throws(AppleAPIError)
        -> TransactionInfoResponse
    {
        try? await processDue()
        var response = TransactionInfoResponse()
        response.signedTransactionInfo = try sign(try scoped(transactionId, environment, bundleId).id)
        return response
    }

    /// Get Transaction History (v2): the customer's transactions, 20 per page.
    public func transactionHistory(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String, revision: String?, descending: Bool
    ) async throws(AppleAPIError) -> HistoryResponse {
        try? await processDue()
        let record = try scoped(transactionId, environment, bundleId)
        var history = accountHistory(of: record)
        if descending { history.reverse() }
        let page = try Self.page(history, after: revision)
        var response = HistoryResponse()
        response.revision = page.revision
        response.hasMore = page.hasMore
        response.bundleId = bundleId
        response.appAppleId = catalog.app(bundleId)?.appAppleId
        response.environment = environment
        response.signedTransactions = try page.items.map { record throws(AppleAPIError) in try sign(record.id) }
        return response
    }

    /// Get Refund History (v2): the customer's refunded transactions.
    public func refundHistory(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String, revision: String?
    )
        async throws(AppleAPIError) -> RefundHistoryResponse
    {
        let record = try scoped(transactionId, environment, bundleId)
        let refunded = accountHistory(of: record).filter {
            $0.isRevoked && $0.transaction.revocationType != .familyRevoke
        }
        let page = try Self.page(refunded, after: revision)
        var response = RefundHistoryResponse()
        response.revision = page.revision
        response.hasMore = page.hasMore
        response.signedTransactions = try page.items.map { record throws(AppleAPIError) in try sign(record.id) }
        return response
    }

    /// Get All Subscription Statuses: every subscription of the customer, by group.
    public func subscriptionStatuses(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String, statuses filter: Set<Int>
    ) async throws(AppleAPIError) -> StatusResponse {
        try? await processDue()
        let record = try scoped(transactionId, environment, bundleId)
        let owned = subscriptions(of: record.account).filter {
            $0.bundleId == bundleId && $0.environment == environment
                && (filter.isEmpty || filter.contains($0.state.status.rawValue))
        }
        var groups: [SubscriptionGroupIdentifierItem] = []
        for groupId in Set(owned.map(\.groupId)).sorted() {
            var item = SubscriptionGroupIdentifierItem()
            item.subscriptionGroupIdentifier = groupId
            // `subscriptions(of:)` is already in original-transaction-id order.
            item.lastTransactions = try owned.filter { $0.groupId == groupId }.map { subscription throws(AppleAPIError) in
                var last = LastTransactionsItem()
                last.status = subscription.state.status
                last.originalTransactionId = subscription.originalTransactionId
                last.signedTransactionInfo = try sign(subscription.latestTransactionId)
                do { last.signedRenewalInfo = try signedRenewalInfo(subscription) } catch { throw .generalInternal }
                return last
            }
            groups.append(item)
        }
        var response = StatusResponse()
        response.environment = environment
        response.bundleId = bundleId
        response.appAppleId = catalog.app(bundleId)?.appAppleId
        response.data = groups
        return response
    }

    /// Look Up Order ID.
    public func lookUpOrder(
        _ orderId: String, environment: AppStoreEnvironment, bundleId: String
    ) throws(AppleAPIError)
        -> OrderLookupResponse
    {
        var response = OrderLookupResponse()
        let found = (orders[orderId] ?? []).compactMap { transactions[$0] }.filter {
            $0.environment == environment && $0.transaction.bundleId == bundleId
        }
        response.status = found.isEmpty ? .invalid : .valid
        response.signedTransactions = try found.map { record throws(AppleAPIError) in try sign(record.id) }
        return response
    }

    /// Send Consumption Information (V2, API 1.19): every product type, checked against each
    /// 400 error Apple names for it, and accepted only while Apple awaits it (12 hours after
    /// the `CONSUMPTION_REQUEST`). Apple's pages give some of these errors no number: the
    /// simulator answers them 4000000 with the error's name in the message.
    public func recordConsumption(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String, _ request: ConsumptionRequest
    ) throws(AppleAPIError) {
        var record = try scoped(transactionId, environment, bundleId)
        guard record.transaction.inAppOwnershipType != .familyShared else {
            throw .badRequest(4_000_185, "FamilyTransactionNotSupportedError: family-shared transactions are not supported.")
        }
        guard request.customerConsented else {
            throw .badRequest(4_000_035, "InvalidCustomerConsentedError: customerConsented must be true.")
        }
        guard DeliveryStatus.documented.contains(request.deliveryStatus) else {
            throw .badRequest(4_000_036, "InvalidDeliveryStatusError: invalid delivery status.")
        }
        if let preference = request.refundPreference, !RefundPreference.documented.contains(preference) {
            throw .badRequest(4_000_000, "InvalidRefundPreferenceError: invalid refund preference.")
        }
        if let percentage = request.consumptionPercentage {
            guard (0...100_000).contains(percentage) else {
                throw .badRequest(4_000_000, "ConsumptionPercentageOutOfRangeError: the consumption percentage is out of range.")
            }
            guard record.transaction.type != .autoRenewable else {
                throw .badRequest(
                    4_000_209,
                    "ConsumptionPercentageAutoRenewableSubscriptionError: no consumption percentage for an auto-renewable subscription.")
            }
            guard request.deliveryStatus == .delivered || percentage == 0 else {
                throw .badRequest(
                    4_000_000, "UndeliveredConsumptionPercentageNonZeroError: an undelivered purchase's consumption percentage must be 0.")
            }
        }
        guard record.consumptionRequested, let asked = record.consumptionRequestedAt, clock.now < asked.addingTimeInterval(12 * 3600)
        else {
            // Apple documents no error of its own for this; the simulator answers its general one.
            throw .badRequest(4_000_000, "Invalid request. The transaction has no outstanding consumption request.")
        }
        record.consumption = request
        record.consumptionRequested = false
        store(record)
    }

    /// Send Consumption Information V1 (deprecated by Apple): for a consumable or an
    /// auto-renewable subscription only, and accepted only while Apple awaits it.
    public func recordConsumptionV1(
        _ transactionId: String, environment: AppStoreEnvironment, bundleId: String, _ request: ConsumptionRequestV1
    ) throws(AppleAPIError) {
        var record = try scoped(transactionId, environment, bundleId)
        // Apple answers 4000047 for another product type since API 1.11; 4000043 is no longer sent.
        guard record.transaction.type == .consumable || record.transaction.type == .autoRenewable else {
            throw .invalidTransactionTypeNotSupported
        }
        guard (0...4).contains(request.consumptionStatus) else { throw .badRequest(4_000_034, "Invalid consumption status.") }
        guard (0...5).contains(request.deliveryStatus) else { throw .badRequest(4_000_036, "Invalid delivery status.") }
        guard (0...2).contains(request.platform) else { throw .badRequest(4_000_039, "Invalid platform.") }
        guard request.appAccountToken.isEmpty || UUID(uuidString: request.appAccountToken) != nil else {
            throw .badRequest(4_000_033, "Invalid app account token.")
        }
        guard record.consumptionRequested else {
            // Apple documents no error of its own for this; the simulator answers its general one.
            throw .badRequest(4_000_000, "Invalid request. The transaction has no outstanding consumption request.")
        }
        record.consumptionV1 = request
        record.consumptionRequested = false
        store(record)
    }

    /// Extend a Subscription Renewal Date, as the API answers it.
    public func extendRenewalDate(
        _ originalTransactionId: String, environment: AppStoreEnvironment, bundleId: String, _ request: ExtendRenewalDateRequest
    ) async throws(AppleAPIError) -> ExtendRenewalDateResponse {
        guard (1...90).contains(request.extendByDays) else { throw .badRequest(4_000_009, "Invalid extend by days value.") }
        guard (0...3).contains(request.extendReasonCode) else { throw .badRequest(4_000_010, "Invalid extend reason code.") }
        guard !request.requestIdentifier.isEmpty, request.requestIdentifier.count <= 128 else {
            throw .badRequest(4_000_011, "Invalid request identifier.")
        }
        guard let subscription = subscriptions[originalTransactionId], subscription.environment == environment,
            subscription.bundleId == bundleId
        else { throw .originalTransactionIdNotFound }
        guard subscription.state == .active else {
            throw AppleAPIError(httpStatus: 403, errorCode: 4_030_004, errorMessage: "Subscription extensions are not allowed.")
        }
        do {
            let result = try await extendRenewalDate(
                originalTransactionId, days: request.extendByDays, reasonCode: request.extendReasonCode,
                requestIdentifier: request.requestIdentifier)
            var response = ExtendRenewalDateResponse()
            response.originalTransactionId = originalTransactionId
            response.webOrderLineItemId = result.webOrderLineItemId
            response.success = true
            response.effectiveDate = AppleTimestamp(result.effectiveDate)
            return response
        } catch {
            throw .generalInternal
        }
    }

    /// Pages of 20; the revision is the offset to continue from.
    static func page(
        _ items: [SimulatedTransaction], after revision: String?
    ) throws(AppleAPIError) -> (
        items: ArraySlice<SimulatedTransaction>, revision: String, hasMore: Bool
    ) {
        var start = 0
        if let revision, !revision.isEmpty {
            guard let data = Data(base64Encoded: revision), let text = String(data: data, encoding: .utf8),
                text.hasPrefix("offset:"), let offset = Int(text.dropFirst(7)), offset >= 0, offset <= items.count
            else { throw .invalidRevision }
            start = offset
        }
        let end = min(items.count, start + pageSize)
        return (items[start..<end], Data("offset:\(end)".utf8).base64EncodedString(), end < items.count)
    }
}

extension SimulatedAppStore {
    /// Request a Test Notification: a signed `TEST` notification to the app's URL.
    public func requestTestNotification(
        environment: AppStoreEnvironment, bundleId: String
    ) async throws(AppleAPIError)
        -> SendTestNotificationResponse
    {
        let app = catalog.app(bundleId)
        var data = NotificationData()
        data.environment = environment
        data.appAppleId = app?.appAppleId
        data.bundleId = bundleId
        data.bundleVersion = app?.bundleVersion
        var payload = NotificationPayload()
        payload.notificationType = .test
        let token = UUID().uuidString.lowercased()
        payload.notificationUUID = token
        payload.data = data
        payload.version = "2.0"
        payload.signedDate = AppleTimestamp(clock.now)
        let signed: String
        do { signed = try signing.sign(payload) } catch { throw .generalInternal }
        await notifications.send(
            OutgoingNotification(
                uuid: token, type: .test, subtype: nil, signedPayload: signed, v1Body: nil, transactionId: "",
                bundleId: bundleId, environment: environment, createdAt: clock.now),
            isTest: true)
        var response = SendTestNotificationResponse()
        response.testNotificationToken = token
        return response
    }

    /// Get Test Notification Status.
    public func testNotificationStatus(
        _ token: String, environment: AppStoreEnvironment, bundleId: String
    ) async throws(AppleAPIError)
        -> CheckTestNotificationResponse
    {
        guard let record = await notifications.record(token), record.isTest, record.notification.bundleId == bundleId,
            record.notification.environment == environment
        else { throw .testNotificationNotFound }
        var response = CheckTestNotificationResponse()
        response.signedPayload = record.notification.signedPayload
        response.sendAttempts = record.attempts
        return response
    }
}
