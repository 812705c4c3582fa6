import AppStore
import Foundation
import Testing

/// Every field of Apple's model vectors (`Tests/Vectors/appstore-library`, copied from
/// Apple's own server library) is either decoded by the AppStore target or listed as
/// ignored, on purpose, in docs/entitlements.md ("Apple's fields"). A field Apple adds to
/// its vectors fails here until Entitle decodes it or says why not.
@Suite struct AppleFieldCoverageTests {
    /// How one vector is read: the model it is, and the same JSON decoded then encoded
    /// again (what the model keeps).
    struct Reader: Sendable {
        var model: String
        var roundTrip: @Sendable (Data) throws -> Data
    }

    static func reader<Model: Codable>(_ type: Model.Type, _ name: String) -> Reader {
        Reader(model: name) { data in try JSONEncoder().encode(try JSONDecoder().decode(Model.self, from: data)) }
    }

    static let models: [String: Reader] = [
        "signedTransaction": reader(JWSTransaction.self, "JWSTransaction"),
        "signedTransactionWithRevocation": reader(JWSTransaction.self, "JWSTransaction"),
        "signedRenewalInfo": reader(JWSRenewalInfo.self, "JWSRenewalInfo"),
        "signedNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "signedConsumptionRequestNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "signedExternalPurchaseTokenNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "signedExternalPurchaseTokenSandboxNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "signedRescindConsentNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "signedSummaryNotification": reader(NotificationPayload.self, "NotificationPayload"),
        "appData": reader(AppData.self, "AppData"),
        "appTransaction": reader(AppTransaction.self, "AppTransaction"),
        "appTransactionInfoResponse": reader(AppTransactionInfoResponse.self, "AppTransactionInfoResponse"),
        "transactionInfoResponse": reader(TransactionInfoResponse.self, "TransactionInfoResponse"),
        "transactionHistoryResponse": reader(HistoryResponse.self, "HistoryResponse"),
        "getAllSubscriptionStatusesResponse": reader(StatusResponse.self, "StatusResponse"),
        "getRefundHistoryResponse": reader(RefundHistoryResponse.self, "RefundHistoryResponse"),
        "lookupOrderIdResponse": reader(OrderLookupResponse.self, "OrderLookupResponse"),
        "getNotificationHistoryResponse": reader(NotificationHistoryResponse.self, "NotificationHistoryResponse"),
        "getTestNotificationStatusResponse": reader(CheckTestNotificationResponse.self, "CheckTestNotificationResponse"),
        "requestTestNotificationResponse": reader(SendTestNotificationResponse.self, "SendTestNotificationResponse"),
        "extendSubscriptionRenewalDateResponse": reader(ExtendRenewalDateResponse.self, "ExtendRenewalDateResponse"),
        "extendRenewalDateForAllActiveSubscribersResponse": Reader(model: "ExtendRenewalDateForAllActiveSubscribersResponse") { _ in
            Data("{}".utf8)
        },
        "getStatusOfSubscriptionRenewalDateExtensionsResponse": Reader(
            model: "GetStatusOfSubscriptionRenewalDateExtensionsResponse"
        ) { _ in Data("{}".utf8) },
        "apiException": reader(APIErrorResponse.self, "APIErrorResponse"),
        "apiTooManyRequestsException": reader(APIErrorResponse.self, "APIErrorResponse"),
        "apiUnknownError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "appTransactionDoesNotExistError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "familyTransactionNotSupportedError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "invalidAppAccountTokenUUIDError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "invalidTransactionIdError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "transactionIdNotFoundError": reader(APIErrorResponse.self, "APIErrorResponse"),
        "transactionIdNotOriginalTransactionId": reader(APIErrorResponse.self, "APIErrorResponse"),
    ]

    /// Vectors of malformed values, which Apple's tests (and `ServerAPIResponseTests`) refuse:
    /// their fields are the well-formed vector's.
    static let malformed: Set<String> = [
        "transactionHistoryResponseWithMalformedAppAppleId", "transactionHistoryResponseWithMalformedEnvironment",
    ]

    /// Xcode's signed data (JWS): the payload is the model.
    static let signed: [String: Reader] = [
        "xcode/xcode-signed-transaction": reader(JWSTransaction.self, "JWSTransaction"),
        "xcode/xcode-signed-renewal-info": reader(JWSRenewalInfo.self, "JWSRenewalInfo"),
        "xcode/xcode-signed-app-transaction": reader(AppTransaction.self, "AppTransaction"),
    ]

    /// The key paths of a JSON value: `a`, `a.b`, `a[].b`; a null says nothing.
    static func paths(_ value: Any, _ prefix: String = "") -> Set<String> {
        var found: Set<String> = []
        if let object = value as? [String: Any] {
            for (key, child) in object where !(child is NSNull) {
                let path = prefix.isEmpty ? key : "\(prefix).\(key)"
                found.insert(path)
                found.formUnion(paths(child, path))
            }
        } else if let array = value as? [Any] {
            for child in array { found.formUnion(paths(child, prefix + "[]")) }
        }
        return found
    }

    /// `Model.path` entries docs/entitlements.md lists as ignored.
    static func ignored() throws -> [String] {
        let docs = try String(
            contentsOf: Vectors.folder.deletingLastPathComponent().deletingLastPathComponent()
                .appending(path: "docs/entitlements.md"), encoding: .utf8)
        let sections = [
            "### JWSTransactionDecodedPayload": "JWSTransaction.", "### JWSRenewalInfoDecodedPayload": "JWSRenewalInfo.",
            "### responseBodyV2DecodedPayload": "NotificationPayload.", "### Other Apple models in the vectors": "",
        ]
        var prefix: String?
        var entries: [String] = []
        for line in docs.split(separator: "\n").map(String.init) {
            if line.hasPrefix("#") { prefix = sections[line] }
            guard let prefix, line.hasPrefix("| `") else { continue }
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 2, cells[1].hasPrefix("ignored") else { continue }
            let names = cells[0].split(separator: "`", omittingEmptySubsequences: false).enumerated().filter { $0.offset % 2 == 1 }.map {
                String($0.element)
            }
            entries += names.map { prefix + $0 }
        }
        return entries
    }

    static func covered(_ path: String, by entries: [String]) -> Bool {
        entries.contains { entry in
            let root = entry.hasSuffix(".*") ? String(entry.dropLast(2)) : entry
            return path == root || path.hasPrefix(root + ".") || path.hasPrefix(root + "[]")
        }
    }

    @Test func everyFieldOfApplesVectorsIsDecodedOrListedAsIgnored() throws {
        let ignored = try Self.ignored()
        #expect(ignored.contains("JWSTransaction.advancedCommerceInfo"), "the table is read: \(ignored)")
        let folder = Vectors.url("appstore-library/swift/models")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".json") }.sorted()
        #expect(files.count >= 30)
        var problems: [String] = []
        var checked = 0
        func check(_ name: String, _ reader: Reader, _ data: Data) throws {
            let original = Self.paths(try JSONSerialization.jsonObject(with: data))
            let kept = Self.paths(try JSONSerialization.jsonObject(with: try reader.roundTrip(data)))
            for path in original.subtracting(kept).sorted() where !Self.covered("\(reader.model).\(path)", by: ignored) {
                problems.append("\(name): \(reader.model).\(path)")
            }
            checked += original.count
        }
        for file in files {
            let name = String(file.dropLast(5))
            if Self.malformed.contains(name) { continue }
            guard let reader = Self.models[name] else {
                problems.append("\(file): a vector no model reads (add it to AppleFieldCoverageTests.models)")
                continue
            }
            try check(name, reader, try Data(contentsOf: folder.appending(path: file)))
        }
        for (path, reader) in Self.signed.sorted(by: { $0.key < $1.key }) {
            let parts = try Vectors.text("appstore-library/swift/\(path)").split(separator: ".")
            try #require(parts.count == 3, "\(path) is a JWS")
            var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            try check(path, reader, try #require(Data(base64Encoded: base64)))
        }
        #expect(problems.isEmpty, "neither decoded nor listed as ignored in docs/entitlements.md:\n\(problems.joined(separator: "\n"))")
        #expect(checked > 300, "\(checked) fields checked")
    }

    /// The check itself: a field nobody decodes and the table does not list is caught.
    @Test func anUndecodedUnlistedFieldIsCaught() throws {
        let ignored = try Self.ignored()
        #expect(!Self.covered("JWSTransaction.someFieldAppleAddsNextYear", by: ignored))
        #expect(Self.covered("JWSTransaction.advancedCommerceInfo.items[].SKU", by: ignored))
        #expect(Self.covered("GetStatusOfSubscriptionRenewalDateExtensionsResponse.complete", by: ignored))
        let vector = Data(#"{"transactionId":"1","someFieldAppleAddsNextYear":{"a":1}}"#.utf8)
        let reader = try #require(Self.models["signedTransaction"])
        let lost = Self.paths(try JSONSerialization.jsonObject(with: vector)).subtracting(
            Self.paths(try JSONSerialization.jsonObject(with: try reader.roundTrip(vector))))
        #expect(lost == ["someFieldAppleAddsNextYear", "someFieldAppleAddsNextYear.a"])
    }
}
