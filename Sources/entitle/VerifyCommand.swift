import AppStore
import ArgumentParser
import Foundation
import X509

/// `entitle verify`: what a receipt, signed transaction, renewal info, app transaction or
/// notification is, and whether it verifies; an app transaction is explained (when the
/// customer first got the app, which version, and whether they bought it while it was paid).
/// Exit 0 valid, 1 not valid, 2 usage error.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Tell what a receipt, signed transaction, renewal info, app transaction or notification is, and whether it verifies.",
        discussion: """
            Exits 0 when the data verifies, 1 when it does not, 2 on a usage error. Certificates are checked at the \
            data's own signing date (a receipt's creation date) unless --at is given. Nothing is sent anywhere. \
            An app transaction may be given as the JWS or as Get App Transaction Info's response \
            ({"signedAppTransactionInfo"}); a RESCIND_CONSENT notification's app transaction is explained too.
            """
    )

    @Flag(help: "Print one JSON object: kind, valid, reason, environment, bundleId, transactionId, ...")
    var json = false

    @Option(name: .customLong("root"), help: "A trusted root certificate (DER or PEM); replaces Apple's roots. Repeatable.")
    var roots: [String] = []

    @Option(help: "Check certificates at this time (ISO 8601) instead of the data's signing date.")
    var at: String?

    @Option(name: .customLong("bundle-id"), help: "Require this bundle id (without it, the bundle id is reported).")
    var bundleId: String?

    @Flag(help: "Accept Xcode and LocalTesting data.")
    var allowTestEnvironments = false

    @Option(
        name: .customLong("paid-before-version"),
        help: """
            For an app transaction of an app that was paid and became free: the first free version (CFBundleVersion; \
            CFBundleShortVersionString on macOS). Tells whether the customer bought the app while it was paid.
            """)
    var paidBeforeVersion: String?

    @Argument(help: "A file holding the data, or - for standard input.")
    var file: String

    func run() async throws {
        let time = try at.map { text -> Date in
            guard let date = try? Date(text, strategy: .iso8601) else {
                throw ValidationError("--at must be an ISO 8601 time such as 2024-01-31T12:00:00Z, not \"\(text)\"")
            }
            return date
        }
        let firstFree = try paidBeforeVersion.map { text -> [Int] in
            guard let version = Self.version(text) else {
                throw ValidationError("--paid-before-version must be numbers separated by dots, such as 2 or 2.0.1, not \"\(text)\"")
            }
            return version
        }
        let certificates = try roots.map(Self.loadCertificate)
        let input: Data
        do {
            input = file == "-" ? FileHandle.standardInput.readDataToEndOfFile() : try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            throw ValidationError("cannot read \(file): \(error.localizedDescription)")
        }
        let inspector = AppleDataInspector(
            bundleId: bundleId, roots: certificates.isEmpty ? nil : certificates, at: time,
            allowTestEnvironments: allowTestEnvironments)
        let result = await inspector.inspect(String(decoding: input, as: UTF8.self))
        if json {
            var object: [String: Any] = ["kind": result.kind.rawValue, "valid": result.valid]
            let optional: [(String, String?)] = [
                ("reason", result.reason), ("environment", result.environment), ("bundleId", result.bundleId),
                ("transactionId", result.transactionId), ("originalTransactionId", result.originalTransactionId),
                ("productId", result.productId), ("notificationType", result.notificationType), ("subtype", result.subtype),
            ]
            for (key, value) in optional { if let value { object[key] = value } }
            if let app = result.appTransaction {
                var fields: [String: Any] = [:]
                for (key, value) in Self.appTransactionFields(app) { if let value { fields[key] = value } }
                if let firstFree, let paid = Self.boughtWhilePaid(app, firstFree: firstFree) { fields["boughtWhilePaid"] = paid }
                object["appTransaction"] = fields
            }
            print(try JSONOutput.line(object))
        } else {
            print("\(result.kind.rawValue): \(result.valid ? "valid" : "NOT valid")")
            if let reason = result.reason { print("  reason: \(reason)") }
            let fields: [(String, String?)] = [
                ("notification type", result.notificationType), ("subtype", result.subtype), ("environment", result.environment),
                ("bundle id", result.bundleId), ("product id", result.productId), ("transaction id", result.transactionId),
                ("original transaction id", result.originalTransactionId),
            ]
            for (label, value) in fields { if let value { print("  \(label): \(value)") } }
            if let app = result.appTransaction { print(Self.explain(app, firstFree: firstFree)) }
        }
        if !result.valid { throw ExitCode(1) }
    }

    // MARK: App transactions

    /// The app transaction's fields as the JSON output names them (Apple's names).
    static func appTransactionFields(_ app: AppTransaction) -> [(String, Any?)] {
        [
            ("appAppleId", app.appAppleId), ("appTransactionId", app.appTransactionId),
            ("applicationVersion", app.applicationVersion), ("originalApplicationVersion", app.originalApplicationVersion),
            ("originalPurchaseDate", app.originalPurchaseDate.map { $0.date.formatted(.iso8601) }),
            ("originalPlatform", app.originalPlatform), ("preorderDate", app.preorderDate.map { $0.date.formatted(.iso8601) }),
            ("receiptCreationDate", app.receiptCreationDate.map { $0.date.formatted(.iso8601) }),
        ]
    }

    /// What an app transaction says about the customer, in words.
    static func explain(_ app: AppTransaction, firstFree: [Int]?) -> String {
        var lines = ["  app transaction (the customer's own purchase or download of the app):"]
        if let id = app.appTransactionId { lines.append("    app transaction id: \(id) (one per Apple Account and app)") }
        if let date = app.originalPurchaseDate {
            lines.append("    first got the app: \(date.date.formatted(.iso8601)) (originalPurchaseDate)")
        }
        if let preorder = app.preorderDate { lines.append("    preordered: \(preorder.date.formatted(.iso8601))") }
        if let version = app.originalApplicationVersion {
            lines.append("    first version: \(version) (originalApplicationVersion: it never changes when the app is updated)")
        }
        if let version = app.applicationVersion { lines.append("    version now: \(version)") }
        if let platform = app.originalPlatform { lines.append("    first platform: \(platform)") }
        if let firstFree {
            let free = firstFree.map(String.init).joined(separator: ".")
            switch boughtWhilePaid(app, firstFree: firstFree) {
            case true?: lines.append("    bought while the app was paid: yes (first version is before \(free))")
            case false?: lines.append("    bought while the app was paid: no (first version is \(free) or later)")
            case nil: lines.append("    bought while the app was paid: unknown (the first version is not numbers separated by dots)")
            }
        }
        if app.receiptType == .sandbox || app.receiptType == .xcode {
            lines.append("    note: outside production Apple reports the first version as 1.0, whatever was installed")
        }
        return lines.joined(separator: "\n")
    }

    /// Whether the customer's first version comes before the first free one, compared number
    /// by number (as strings "2" would sort after "13"); nil when it is not such a version.
    static func boughtWhilePaid(_ app: AppTransaction, firstFree: [Int]) -> Bool? {
        guard let text = app.originalApplicationVersion, let first = version(text) else { return nil }
        let count = max(first.count, firstFree.count)
        let a = first + Array(repeating: 0, count: count - first.count)
        let b = firstFree + Array(repeating: 0, count: count - firstFree.count)
        return a.lexicographicallyPrecedes(b)
    }

    /// "2.0.1" as [2, 0, 1]; nil unless it is 1 to 4 non-negative numbers of at most 9 digits.
    static func version(_ text: String) -> [Int]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count) else { return nil }
        var numbers: [Int] = []
        for part in parts {
            guard (1...9).contains(part.count), part.allSatisfy(\.isASCII), part.allSatisfy(\.isNumber), let number = Int(part) else {
                return nil
            }
            numbers.append(number)
        }
        return numbers
    }

    static func loadCertificate(_ path: String) throws -> Certificate {
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read --root \(path)") }
        if let certificate = try? Certificate(derEncoded: Array(data)) { return certificate }
        if let certificate = try? Certificate(pemEncoded: String(decoding: data, as: UTF8.self)) { return certificate }
        throw ValidationError("--root \(path) is not a DER or PEM certificate")
    }
}
