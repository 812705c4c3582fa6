import Deflate
import Foundation

/// A succeeded job's result as the hash's fourth format keeps it (Jobs/README.md, "The
/// job's hash"): a result over 64 bytes is deflated, primed with a dictionary of what
/// results usually say, and sent to `finish` as `z1:` and base64, marked packed; `finish`
/// keeps such a text in pieces of at most 64 bytes (`result`, then `result2` to `result16`), so that a finished
/// record whose other values are short stays in Redis's compact encoding (a listpack, under
/// the default `hash-max-listpack-value` of 64) instead of a hashtable of twice the bytes.
///
/// JSON never starts with `z`, so a `result` without the marker is the result itself: what
/// the older formats wrote, a short result, and one that deflate would not make shorter or
/// that would take more than 16 pieces. (A handler's text that is not JSON and starts with
/// the marker is kept as a JSON string: `unambiguous`.)
package enum StoredResult {
    /// Starts a packed result; the `1` names `dictionary`, which can never change under it.
    static let marker = "z1:"
    /// The longest value Redis keeps in a listpack under its default settings.
    static let pieceLength = 64
    /// The most pieces a packed result takes; a longer one is kept as JSON.
    static let maxPieces = 16
    /// The hash's fields a packed result's pieces are kept in, in order.
    static let pieceFields = ["result"] + (2...maxPieces).map { "result\($0)" }

    /// A handler's result as `finish` should be given it for the fourth format: `packed`
    /// (and `finish` keeps `text` in pieces), or as it is (`unambiguous`).
    package static func stored(_ result: String) -> (text: String, packed: Bool) {
        let result = unambiguous(result)
        let bytes = Array(result.utf8)
        guard bytes.count > pieceLength, let deflated = try? Deflate.compress(bytes, dictionary: dictionary) else { return (result, false) }
        let text = marker + Data(deflated).base64EncodedString()
        return text.utf8.count < bytes.count && text.utf8.count <= pieceLength * maxPieces ? (text, true) : (result, false)
    }

    /// A handler's result as any format keeps it: a text that is not JSON but starts as a
    /// packed result does would not read back as itself, so it is kept as a JSON string
    /// of itself (the API shows either as that string).
    package static func unambiguous(_ result: String) -> String {
        guard isPacked(result) else { return result }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return String(decoding: (try? encoder.encode(result)) ?? Data(#""""#.utf8), as: UTF8.self)
    }

    /// Whether a record's `result` field starts a packed result (its pieces follow).
    static func isPacked(_ first: String) -> Bool { first.hasPrefix(marker) }

    /// The result JSON of a record's `result` field and its pieces (`fields`, as
    /// `pieceFields` names them); `nil` when there is none, or a packed one does not inflate
    /// (damaged, or written with another dictionary).
    package static func result(_ fields: (String) -> String?) -> String? {
        guard let first = fields("result") else { return nil }
        guard isPacked(first) else { return first }
        var text = String(first.dropFirst(marker.count))
        for name in pieceFields.dropFirst() {
            guard let piece = fields(name) else { break }
            text += piece
        }
        guard let deflated = Data(base64Encoded: text),
            let inflated = try? Deflate.decompress(Array(deflated), dictionary: dictionary, limit: 16 << 20)
        else { return nil }
        return String(decoding: inflated, as: UTF8.self)
    }

    /// What results usually say: Entitle's handlers' keys and values (a purchase's, a
    /// notification's), ordered so the commonest sit nearest the end, where deflate reaches
    /// them with the shortest distances. Any JSON deflates with it; theirs to a sixth.
    static let dictionary = Array(
        ("\"message\":\"\",\"reason\":\"\",\"provisional\":true,\"provisionalUntil\":\"\",\"dryRun\":true,"
            + "\"finished\":true,\"sharedWith\":\"\",\"transfer\":{\"jobId\":\"\",\"from\":\"\",\"to\":\"\",\"vouchedBy\":\"\"},"
            + "\"coupon\":{\"code\":\"\",\"known\":false},\"handling\":\"recorded\",\"refundJobId\":\"\","
            + "\"consumptionJobId\":\"\",\"webhookJobId\":\"\",\"credits\":{\"added\":0,\"balance\":0},\"price\":\"0.99\","
            + "\"currency\":\"USD\",\"transferredFrom\":\"\",\"status\":\"expired\",\"status\":\"billingRetry\","
            + "\"isInBillingRetry\":true,\"gracePeriodExpiresDate\":\"\","
            + "{\"accessGranted\":true,\"customer\":\"\",\"duplicate\":false,\"entitlements\":[\"\"],\"notificationId\":\"v1:\","
            + "\"notificationType\":\"DID_RENEW\",\"subtype\":\"\",\"originalTransactionId\":\"\",\"publisher\":\"\","
            + "\"subscription\":{\"asOf\":\"2026-11-27T07:04:02Z\",\"autoRenew\":true,\"autoRenewProductId\":\"\","
            + "\"expiresDate\":\"2026-11-27T07:07:01Z\",\"isInBillingRetry\":false,\"isIntroductoryOffer\":true,"
            + "\"latestTransactionId\":\"\",\"offerId\":\"\",\"originalTransactionId\":\"\",\"productId\":\"\",\"status\":\"active\"}}"
            + "{\"accessGranted\":true,\"claim\":{\"heldByAnotherCustomer\":false,\"outcome\":\"granted\","
            + "\"proofSignedAt\":\"2026-11-27T07:04:01Z\"},\"credits\":{\"added\":0,\"balance\":0},\"currency\":\"USD\","
            + "\"customer\":\"@example.com\",\"entitlements\":[\"\"],\"offerId\":\"\",\"originalTransactionId\":\"\",\"price\":\"0\","
            + "\"productId\":\"com.\",\"publisher\":\"\",\"subscription\":{\"asOf\":\"2026-11-27T07:04:01Z\",\"autoRenew\":true,"
            + "\"autoRenewProductId\":\"com.\",\"expiresDate\":\"2026-11-27T07:07:01Z\",\"isInBillingRetry\":false,"
            + "\"isIntroductoryOffer\":true,\"latestTransactionId\":\"\",\"offerId\":\"\",\"originalTransactionId\":\"\","
            + "\"productId\":\"com.\",\"status\":\"active\"},\"transactionId\":\"\"}").utf8)
}
