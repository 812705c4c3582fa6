import AppStore
import Foundation

/// Writes an `AppReceipt` as the ASN.1 payload Apple signs: a SET of (type, version, value)
/// attributes, in-app purchases nested as attribute 17. The inverse of the AppStore
/// target's parser, so a receipt round-trips.
enum AppReceiptEncoder {
    static func encode(_ receipt: AppReceipt) -> [UInt8] {
        var attributes: [[UInt8]] = []
        func add(_ type: Int64, _ value: [UInt8]?) {
            guard let value else { return }
            attributes.append(DERWriter.sequence([DERWriter.integer(type), DERWriter.integer(1), DERWriter.octetString(value)]))
        }
        add(0, receipt.receiptType.map(DERWriter.utf8String))
        add(1, receipt.appItemId.map(DERWriter.integer))
        add(2, receipt.bundleIdBytes ?? receipt.bundleId.map(DERWriter.utf8String))
        add(3, receipt.applicationVersion.map(DERWriter.utf8String))
        add(4, receipt.opaqueValue)
        add(5, receipt.sha1Hash)
        add(12, receipt.creationDate.map(date))
        add(19, receipt.originalApplicationVersion.map(DERWriter.utf8String))
        add(21, receipt.expirationDate.map(date))
        for purchase in receipt.inAppPurchases { add(17, encode(purchase)) }
        return DERWriter.set(attributes)
    }

    private static func encode(_ purchase: ReceiptInAppPurchase) -> [UInt8] {
        var attributes: [[UInt8]] = []
        func add(_ type: Int64, _ value: [UInt8]?) {
            guard let value else { return }
            attributes.append(DERWriter.sequence([DERWriter.integer(type), DERWriter.integer(1), DERWriter.octetString(value)]))
        }
        add(1701, purchase.quantity.map { DERWriter.integer(Int64($0)) })
        add(1702, purchase.productId.map(DERWriter.utf8String))
        add(1703, purchase.transactionId.map(DERWriter.utf8String))
        add(1704, purchase.purchaseDate.map(date))
        add(1705, purchase.originalTransactionId.map(DERWriter.utf8String))
        add(1706, purchase.originalPurchaseDate.map(date))
        add(1708, purchase.expiresDate.map(date))
        add(1711, purchase.webOrderLineItemId.map(DERWriter.integer))
        add(1712, purchase.cancellationDate.map(date))
        add(1713, purchase.isTrialPeriod.map { DERWriter.integer($0 ? 1 : 0) })
        add(1719, purchase.isInIntroOfferPeriod.map { DERWriter.integer($0 ? 1 : 0) })
        add(1721, purchase.promotionalOfferIdentifier.map(DERWriter.utf8String))
        return DERWriter.set(attributes)
    }

    /// Apple writes receipt dates as IA5String RFC 3339 in UTC.
    private static func date(_ timestamp: AppleTimestamp) -> [UInt8] {
        DERWriter.ia5String(timestamp.date.formatted(.iso8601))
    }
}
