/// An iOS 6 style transaction receipt (`SKPaymentTransaction.transactionReceipt`): base64 of
/// an old-style property list holding a `signature` and a base64 `purchase-info` list.
///
/// Its signature uses a retired Apple format and CA, so it cannot be verified locally: the
/// values here are claims until verifyReceipt confirms them.
public struct LegacyTransactionReceipt: Sendable, Hashable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var productId: String?
    public var bundleId: String?
    public var purchaseDate: AppleTimestamp?
    public var expiresDate: AppleTimestamp?
    public var webOrderLineItemId: String?
    public var quantity: Int?
    /// `Sandbox` when present; production receipts omit it.
    public var environment: String?

    /// Parses a base64 transaction receipt.
    public init(base64 text: String) throws(AppStoreError) {
        guard let bytes = AppleBase64.decode(text),
            let outer = OldStylePropertyList.parse(String(decoding: bytes, as: UTF8.self)),
            let purchaseInfo = outer["purchase-info"], let innerBytes = AppleBase64.decode(purchaseInfo),
            let inner = OldStylePropertyList.parse(String(decoding: innerBytes, as: UTF8.self))
        else {
            throw AppStoreError(.invalidFormat, "not an iOS 6 transaction receipt")
        }
        transactionId = inner["transaction-id"]
        originalTransactionId = inner["original-transaction-id"]
        productId = inner["product-id"]
        bundleId = inner["bid"]
        purchaseDate = inner["purchase-date-ms"].flatMap(Int64.init).map(AppleTimestamp.init(milliseconds:))
        expiresDate = (inner["expires-date"] ?? inner["expires-date-ms"]).flatMap(Int64.init).map(
            AppleTimestamp.init(milliseconds:))
        webOrderLineItemId = inner["web-order-line-item-id"]
        quantity = inner["quantity"].flatMap(Int.init)
        environment = outer["environment"]
    }

    /// Whether base64 text looks like a transaction receipt rather than a PKCS#7 app receipt.
    public static func looksLikeTransactionReceipt(_ bytes: [UInt8]) -> Bool {
        bytes.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }) == UInt8(ascii: "{")
    }
}

/// The `{ "key" = "value"; ... }` text format of NeXTSTEP property lists, as far as
/// transaction receipts use it (one level of string values).
enum OldStylePropertyList {
    static func parse(_ text: String) -> [String: String]? {
        var scalars = Array(text.unicodeScalars)[...]
        func skipSpace() { while let first = scalars.first, first.properties.isWhitespace { scalars.removeFirst() } }
        func token() -> String? {
            skipSpace()
            guard let first = scalars.first else { return nil }
            var value = String.UnicodeScalarView()
            if first == "\"" {
                scalars.removeFirst()
                while let scalar = scalars.first {
                    scalars.removeFirst()
                    if scalar == "\"" { return String(value) }
                    if scalar == "\\", let escaped = scalars.first {
                        scalars.removeFirst()
                        value.append(escaped == "n" ? "\n" : escaped)
                    } else {
                        value.append(scalar)
                    }
                }
                return nil
            }
            while let scalar = scalars.first, !scalar.properties.isWhitespace, !";={}".unicodeScalars.contains(scalar) {
                value.append(scalar)
                scalars.removeFirst()
            }
            return value.isEmpty ? nil : String(value)
        }
        skipSpace()
        guard scalars.first == "{" else { return nil }
        scalars.removeFirst()
        var result: [String: String] = [:]
        while true {
            skipSpace()
            if scalars.first == "}" { return result }
            guard let key = token() else { return nil }
            skipSpace()
            guard scalars.first == "=" else { return nil }
            scalars.removeFirst()
            guard let value = token() else { return nil }
            result[key] = value
            skipSpace()
            if scalars.first == ";" { scalars.removeFirst() }
        }
    }
}
