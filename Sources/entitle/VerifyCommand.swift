import AppStore
import ArgumentParser
import Foundation
import X509

/// `entitle verify`: what a receipt, signed transaction, renewal info or notification is,
/// and whether it verifies. Exit 0 valid, 1 not valid, 2 usage error.
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Tell what a receipt, signed transaction, renewal info or notification is, and whether it verifies.",
        discussion: """
            Exits 0 when the data verifies, 1 when it does not, 2 on a usage error. Certificates are checked at the \
            data's own signing date (a receipt's creation date) unless --at is given. Nothing is sent anywhere.
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

    @Argument(help: "A file holding the data, or - for standard input.")
    var file: String

    func run() async throws {
        let time = try at.map { text -> Date in
            guard let date = try? Date(text, strategy: .iso8601) else {
                throw ValidationError("--at must be an ISO 8601 time such as 2024-01-31T12:00:00Z, not \"\(text)\"")
            }
            return date
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
        }
        if !result.valid { throw ExitCode(1) }
    }

    static func loadCertificate(_ path: String) throws -> Certificate {
        guard let data = FileManager.default.contents(atPath: path) else { throw ValidationError("cannot read --root \(path)") }
        if let certificate = try? Certificate(derEncoded: Array(data)) { return certificate }
        if let certificate = try? Certificate(pemEncoded: String(decoding: data, as: UTF8.self)) { return certificate }
        throw ValidationError("--root \(path) is not a DER or PEM certificate")
    }
}
