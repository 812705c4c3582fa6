import AppStore
import Entitlements
import Foundation

/// Verified facts Apple gave about purchases: transactions, renewal infos (keyed by
/// original transaction id) and, on the receipt road, the latest receipt.
package struct AppleEvidence: Sendable, Hashable {
    package var facts: [PurchaseFact] = []
    package var renewals: [String: RenewalFact] = [:]
    package var latestReceipt: String?
    /// verifyReceipt answered 21006: the receipt is valid, its subscription has expired.
    /// A bare 21006 brings no transaction at all.
    package var subscriptionExpired = false
    /// When Apple signed the proof a client posted: a signed transaction's `signedDate`, an
    /// app receipt's creation date. How fresh a claim is (`ClaimRule`); Apple's own answers
    /// to Entitle are not the client's proof and leave it as it is.
    package var proofSignedAt: Date?

    package init(
        facts: [PurchaseFact] = [], renewals: [String: RenewalFact] = [:], latestReceipt: String? = nil, subscriptionExpired: Bool = false
    ) {
        self.facts = facts
        self.renewals = renewals
        self.latestReceipt = latestReceipt
        self.subscriptionExpired = subscriptionExpired
    }

    /// Set when the facts were verified here while Apple could not be asked (its API down,
    /// slow or limiting): their purchases give access until then unless Apple's word comes
    /// first (`CustomerEntitlements.provisional`).
    package var provisionalUntil: Date?

    /// Adds a transaction as one answer lists it (verifyReceipt's `in_app`, then
    /// `latest_receipt_info`): a later entry of a transaction listed before replaces it, with
    /// what only the earlier says. All of an answer's entries carry its one request date, so
    /// `merge`'s rule for views signed together does not apply: an `in_app` entry from a
    /// receipt made while a refund stood still shows it after its reversal, and the latest
    /// info, listed after it, does not.
    package mutating func list(_ fact: PurchaseFact) {
        if let index = facts.firstIndex(where: { $0.transactionId == fact.transactionId }) {
            facts[index] = fact.filled(from: facts[index])
        } else {
            facts.append(fact)
        }
    }

    /// Adds facts, a transaction seen twice kept once (the view that outranks the other,
    /// `PurchaseFact.outranks`: the later signed, of two signed in the same millisecond the
    /// one with a revocation, the added one otherwise; with what only the other view says).
    /// Views Apple signed apart: entries of one verifyReceipt answer go in with `list`.
    package mutating func merge(_ other: AppleEvidence) {
        for fact in other.facts {
            if let index = facts.firstIndex(where: { $0.transactionId == fact.transactionId }) {
                if fact.outranks(facts[index]) {
                    facts[index] = fact.filled(from: facts[index])
                } else {
                    facts[index] = facts[index].filled(from: fact)
                }
            } else {
                facts.append(fact)
            }
        }
        renewals.merge(other.renewals) { old, new in (new.signedDate ?? .distantPast) >= (old.signedDate ?? .distantPast) ? new : old }
        latestReceipt = other.latestReceipt ?? latestReceipt
        subscriptionExpired = subscriptionExpired || other.subscriptionExpired
    }

    /// The facts in the order the engine applies them: by purchase date, then transaction id.
    package var inAppliedOrder: [PurchaseFact] {
        facts.sorted { ($0.purchaseDate, $0.transactionId) < ($1.purchaseDate, $1.transactionId) }
    }

}

/// Reads verified facts from Apple for one app: each road (a signed transaction, the App
/// Store Server API, verifyReceipt) ends in `PurchaseFact`s. A permanent verification
/// failure is an `AppStoreError` that is not retryable.
package struct AppleReader: Sendable {
    package let gateway: AppleGateway
    package let publisher: Publisher

    package init(gateway: AppleGateway, publisher: Publisher) {
        self.gateway = gateway
        self.publisher = publisher
    }

    package func signedTransaction(_ jws: String) async throws -> PurchaseFact {
        try fact(try await gateway.signedData.verifyTransaction(jws))
    }

    package func fact(_ transaction: JWSTransaction) throws -> PurchaseFact {
        do {
            return try AppleFacts.purchase(transaction)
        } catch {
            throw AppStoreError(.invalidFormat, "Apple's transaction has no \(error.field)")
        }
    }

    package func renewal(_ jws: String) async throws -> RenewalFact {
        do {
            return try AppleFacts.renewal(try await gateway.signedData.verifyRenewalInfo(jws))
        } catch let error as AppleFacts.Incomplete {
            throw AppStoreError(.invalidFormat, "Apple's renewal info has no \(error.field)")
        }
    }

    package func serverAPI(_ environment: String?) throws -> AppStoreServerAPIClient {
        guard let client = gateway.serverAPI(for: environment) else {
            throw JobRefusal.notPossible(
                code: "noServerAPIKey",
                "app \(gateway.app.bundleId) of \(publisher.id) has no App Store Server API key: send a signed transaction or an app receipt"
            )
        }
        return client
    }

    /// Get Transaction Info.
    package func transaction(id: String, environment: String? = nil) async throws -> PurchaseFact {
        let response = try await serverAPI(environment).getTransactionInfo(transactionId: id)
        guard let signed = response.signedTransactionInfo else {
            throw AppStoreError(.invalidFormat, "Apple's transaction info carries no signed transaction")
        }
        return try await signedTransaction(signed)
    }

    /// Get All Subscription Statuses: the subscription's latest transaction and renewal info.
    package func subscription(originalTransactionId: String, environment: String?) async throws -> AppleEvidence {
        let response = try await serverAPI(environment).getAllSubscriptionStatuses(transactionId: originalTransactionId)
        var evidence = AppleEvidence()
        for item in (response.data ?? []).flatMap({ $0.lastTransactions ?? [] })
        where item.originalTransactionId == nil || item.originalTransactionId == originalTransactionId {
            if let signed = item.signedTransactionInfo { evidence.facts.append(try await signedTransaction(signed)) }
            if let signed = item.signedRenewalInfo {
                let renewal = try await renewal(signed)
                evidence.renewals[renewal.originalTransactionId] = renewal
            }
        }
        return evidence
    }

    /// verifyReceipt: every transaction of the receipt and its latest info, with pending renewals.
    package func receipt(_ base64: String) async throws -> AppleEvidence {
        // Apple answers garbage with 21002, which it also uses for its own hiccups (retryable):
        // refuse what cannot be a receipt (a DER PKCS#7 container, or an iOS 6 plist) here.
        guard let bytes = AppleBase64.decode(base64), bytes.count >= 16, bytes[0] == 0x30 || bytes[0] == UInt8(ascii: "{") else {
            throw AppStoreError(.invalidFormat, "the receipt is not base64 of an App Store receipt")
        }
        let result = try await gateway.receipts.verify(receiptData: base64)
        let response = result.response
        if result.outcome == .expired, response.receipt == nil {
            // A bare 21006: Apple vouches for the receipt and says its subscription has
            // expired, and says nothing else (not even the app: it is no wrong bundle).
            return AppleEvidence(latestReceipt: response.latestReceipt ?? base64, subscriptionExpired: true)
        }
        guard let bundleId = response.receipt?.bundleId, bundleId == gateway.app.bundleId else {
            throw AppStoreError(
                .invalidAppIdentifier, "the receipt is for app \(response.receipt?.bundleId ?? "unknown"), not \(gateway.app.bundleId)")
        }
        let requestDate = response.receipt?.requestDate?.date
        var evidence = AppleEvidence(latestReceipt: response.latestReceipt ?? base64, subscriptionExpired: result.outcome == .expired)
        evidence.proofSignedAt = response.receipt?.receiptCreationDate?.date
        let items =
            (response.receipt?.inApp ?? []) + (response.latestReceiptInfo ?? []) + (response.receipt?.transaction.map { [$0] } ?? [])
        for item in items {
            do {
                let kind = kind(ofProduct: item.productId, expires: item.expiresDate != nil)
                let fact = try AppleFacts.purchase(
                    item, bundleId: bundleId, environment: result.environment, kind: kind, requestDate: requestDate)
                evidence.list(fact)
            } catch {
                throw AppStoreError(.invalidFormat, "a transaction in the receipt has no \(error.field)")
            }
        }
        for item in response.pendingRenewalInfo ?? [] {
            if let renewal = try? AppleFacts.renewal(item, requestDate: requestDate) {
                evidence.renewals[renewal.originalTransactionId] = renewal
            }
        }
        return evidence
    }

    /// Receipts do not say a product's kind: the catalog's offer does (credits: consumable,
    /// days: non-renewing, an expiry or a subscription group: auto-renewable).
    package func kind(ofProduct productId: String?, expires: Bool) -> ProductKind {
        guard let productId, let offer = publisher.offer(forProduct: productId) else { return expires ? .autoRenewable : .nonConsumable }
        if expires || publisher.level(ofProduct: productId) != nil { return .autoRenewable }
        if offer.credits != nil { return .consumable }
        if offer.accessDays != nil { return .nonRenewing }
        return .nonConsumable
    }
}
