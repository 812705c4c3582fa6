import Foundation
import SwiftASN1

/// Reads the ASN.1 payload of an app receipt: a SET of (type, version, value) attributes,
/// where attribute 17 holds each in-app purchase as a nested SET of the same shape.
enum AppReceiptPayloadParser {
    static func parse(_ bytes: [UInt8]) throws(AppStoreError) -> AppReceipt {
        var receipt = AppReceipt()
        do {
            for (type, value) in try attributes(bytes) {
                switch type {
                case 0: receipt.receiptType = try string(value)
                case 1: receipt.appItemId = try integer(value)
                case 2:
                    receipt.bundleId = try string(value)
                    receipt.bundleIdBytes = value
                case 3: receipt.applicationVersion = try string(value)
                case 4: receipt.opaqueValue = value
                case 5: receipt.sha1Hash = value
                case 12: receipt.creationDate = try date(value)
                case 17: receipt.inAppPurchases.append(try inAppPurchase(value))
                case 19: receipt.originalApplicationVersion = try string(value)
                case 21: receipt.expirationDate = try date(value)
                default: continue
                }
            }
        } catch let error as AppStoreError {
            throw error
        } catch {
            throw AppStoreError(.invalidFormat, "the receipt payload is not Apple's ASN.1: \(error)")
        }
        return receipt
    }

    private static func inAppPurchase(_ bytes: [UInt8]) throws -> ReceiptInAppPurchase {
        var purchase = ReceiptInAppPurchase()
        for (type, value) in try attributes(bytes) {
            switch type {
            case 1701: purchase.quantity = Int(try integer(value))
            case 1702: purchase.productId = try string(value)
            case 1703: purchase.transactionId = try string(value)
            case 1704: purchase.purchaseDate = try date(value)
            case 1705: purchase.originalTransactionId = try string(value)
            case 1706: purchase.originalPurchaseDate = try date(value)
            case 1708: purchase.expiresDate = try date(value)
            case 1711: purchase.webOrderLineItemId = try integer(value)
            case 1712: purchase.cancellationDate = try date(value)
            case 1713: purchase.isTrialPeriod = try integer(value) != 0
            case 1719: purchase.isInIntroOfferPeriod = try integer(value) != 0
            case 1721: purchase.promotionalOfferIdentifier = try string(value)
            default: continue
            }
        }
        return purchase
    }

    /// The (type, value) pairs of a receipt attribute SET.
    private static func attributes(_ bytes: [UInt8]) throws -> [(Int, [UInt8])] {
        let set = try BER.parse(bytes)
        guard set.identifier == .set else { throw AppStoreError(.invalidFormat, "the receipt payload is not an ASN.1 SET") }
        return try PKCS7SignedData.children(of: set).map { attribute in
            let parts = try PKCS7SignedData.children(of: attribute)
            guard parts.count == 3 else { throw AppStoreError(.invalidFormat, "a receipt attribute is not (type, version, value)") }
            let type = try Int(derEncoded: Array(parts[0].encodedBytes))
            return (type, try PKCS7SignedData.octetString(parts[2]))
        }
    }

    private static func string(_ value: [UInt8]) throws -> String {
        let node = try BER.parse(value)
        return String(decoding: try PKCS7SignedData.octetString(node), as: UTF8.self)
    }

    private static func integer(_ value: [UInt8]) throws -> Int64 {
        try Int64(derEncoded: value)
    }

    /// Apple's receipt dates: RFC 3339 (`2023-10-19T01:18:54Z`), or with a numeric offset
    /// (`2020-07-22T18:33:14+0100`, Xcode); an empty string means none.
    static func date(_ value: [UInt8]) throws -> AppleTimestamp? {
        let text = try string(value)
        if text.isEmpty { return nil }
        guard let date = parseDate(text) else { throw AppStoreError(.invalidFormat, "unreadable receipt date \"\(text)\"") }
        return AppleTimestamp(date)
    }

    static func parseDate(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<(start + count)] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard bytes.count >= 19, let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
            let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2)
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            var scale = 0.1
            index += 1
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offsetSeconds = 0
        if index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "Z"): break
            case UInt8(ascii: "+"), UInt8(ascii: "-"):
                let sign = bytes[index] == UInt8(ascii: "-") ? -1 : 1
                let colon = index + 3 < bytes.count && bytes[index + 3] == UInt8(ascii: ":") ? 1 : 0
                guard let hours = number(index + 1, 2), let minutes = number(index + 3 + colon, 2) else { return nil }
                offsetSeconds = sign * (hours * 3600 + minutes * 60)
            default: return nil
            }
        }
        var components = DateComponents()
        components.year = year
        components.month = month
        components.day = day
        components.hour = hour
        components.minute = minute
        components.second = second
        var calendar = Calendar(identifier: .gregorian)
        guard let utc = TimeZone(identifier: "UTC") else { return nil }
        calendar.timeZone = utc
        guard let date = calendar.date(from: components) else { return nil }
        return date.addingTimeInterval(fraction - Double(offsetSeconds))
    }
}
