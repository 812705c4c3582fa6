import Entitlements
import Foundation

/// One line of an import (a publisher arriving with the customers it already has): a
/// customer and Apple's proof of one purchase of theirs, which becomes a `receipt` job
/// through the publisher's own road (secret key), marked imported.
package struct ImportLine: Sendable, Hashable {
    package enum Proof: Sendable, Hashable {
        /// Asked about with Get Transaction Info (and the statuses, for a subscription).
        case originalTransactionId(String)
        case signedTransaction(String)
        case appReceipt(String)

        var key: String {
            switch self {
            case .originalTransactionId(let id): "t:" + id
            case .signedTransaction(let jws): "s:" + jws
            case .appReceipt(let receipt): "r:" + receipt
            }
        }
    }

    /// The line's number in the file (1 for the first).
    package var line: Int
    package var customer: String
    package var proof: Proof
    package var bundleId: String?

    /// The `receipt` job the line becomes.
    package func payload(publisher: String, webhooks: Bool) -> JobPayloads.Receipt {
        var payload: JobPayloads.Receipt
        switch proof {
        case .originalTransactionId(let id):
            payload = .init(publisher: publisher, customer: customer, transactionId: id, bundleId: bundleId)
        case .signedTransaction(let jws):
            payload = .init(publisher: publisher, customer: customer, signedTransaction: jws, bundleId: bundleId)
        case .appReceipt(let receipt): payload = .init(publisher: publisher, customer: customer, appReceipt: receipt, bundleId: bundleId)
        }
        payload.imported = true
        payload.importWebhooks = webhooks ? true : nil
        return payload
    }

    /// The job's idempotency key: the same line imported again is the same job.
    package func idempotencyKey(publisher: String) -> String {
        "import:\(publisher):" + ImportFile.digest(customer + "\n" + proof.key)
    }
}

/// An import's lines: CSV (`customer,proof`, a header line allowed; the proof an original
/// transaction id, a signed transaction or a base64 app receipt, told apart by their form)
/// or JSON lines (`{"customer", "originalTransactionId" | "signedTransaction" |
/// "appReceipt", "bundleId"?}`). A malformed line is refused with its message; the others
/// are imported.
package enum ImportFile {
    /// At most this many lines in one import.
    package static let maximumLines = 1_000_000
    /// The largest proof a line may carry (an app receipt of a long subscription is ~50 KB).
    static let maximumProof = 256 << 10

    package struct Parsed: Sendable {
        package var lines: [ImportLine] = []
        package var refused: [(line: Int, message: String)] = []
    }

    /// The import's id: the digest of its text (the same file imported again is the same import).
    package static func id(of text: String) -> String { String(digest(text).prefix(24)) }

    static func digest(_ text: String) -> String { SHA256Hex.of(text) }

    package static func parse(_ text: String, publisher: Publisher) -> Parsed {
        var parsed = Parsed()
        var number = 0
        // A spreadsheet's export may begin with a byte order mark.
        let text = text.hasPrefix("\u{FEFF}") ? String(text.dropFirst()) : text
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || (number == 1 && line.lowercased().hasPrefix("customer,")) { continue }
            guard parsed.lines.count + parsed.refused.count < maximumLines else {
                parsed.refused.append((number, "more than \(maximumLines) lines: the rest is not imported"))
                break
            }
            switch parseLine(line, number: number, publisher: publisher) {
            case .success(let item): parsed.lines.append(item)
            case .failure(let refusal): parsed.refused.append((number, refusal.message))
            }
        }
        return parsed
    }

    struct Refusal: Error { var message: String }

    static func parseLine(_ line: String, number: Int, publisher: Publisher) -> Result<ImportLine, Refusal> {
        var customer: String
        var proof: ImportLine.Proof
        var bundleId: String?
        if line.hasPrefix("{") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                return .failure(Refusal(message: "not a JSON object"))
            }
            let allowed: Set<String> = ["customer", "originalTransactionId", "signedTransaction", "appReceipt", "bundleId"]
            if let unknown = object.keys.sorted().first(where: { !allowed.contains($0) }) {
                return .failure(Refusal(message: "unknown field \(unknown)"))
            }
            guard let id = object["customer"] as? String else { return .failure(Refusal(message: "customer is required")) }
            customer = id
            let proofs = ["originalTransactionId", "signedTransaction", "appReceipt"].compactMap { name in
                (object[name] as? String).map { (name, $0) }
            }
            guard proofs.count == 1, let (kind, value) = proofs.first else {
                return .failure(Refusal(message: "give exactly one of originalTransactionId, signedTransaction and appReceipt"))
            }
            switch kind {
            case "originalTransactionId": proof = .originalTransactionId(value)
            case "signedTransaction": proof = .signedTransaction(value)
            default: proof = .appReceipt(value)
            }
            if let bundle = object["bundleId"] {
                guard let bundle = bundle as? String else { return .failure(Refusal(message: "bundleId must be a string")) }
                bundleId = bundle
            }
        } else {
            let fields = line.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            guard fields.count >= 2, !fields[1].isEmpty else { return .failure(Refusal(message: "expected customer,proof")) }
            customer = fields[0]
            let value = fields[1]
            if value.allSatisfy(\.isNumber) {
                proof = .originalTransactionId(value)
            } else if value.split(separator: ".", omittingEmptySubsequences: false).count == 3 {
                proof = .signedTransaction(value)
            } else {
                proof = .appReceipt(value)
            }
            if fields.count == 3, !fields[2].isEmpty { bundleId = fields[2] }
        }
        if let problem = publisher.customerIdProblem(customer) { return .failure(Refusal(message: problem)) }
        customer = publisher.canonicalCustomerId(customer)
        switch proof {
        case .originalTransactionId(let id):
            guard (1...32).contains(id.count), id.allSatisfy({ $0.isASCII && $0.isNumber }) else {
                return .failure(Refusal(message: "originalTransactionId must be the App Store's digits"))
            }
        case .signedTransaction(let value):
            // As POST /v1/purchases takes them: a signed transaction is a few KB.
            guard value.utf8.count <= 64 << 10 else {
                return .failure(Refusal(message: "the signed transaction is larger than 65536 bytes"))
            }
        case .appReceipt(let value):
            guard value.utf8.count <= maximumProof else {
                return .failure(Refusal(message: "the proof is larger than \(maximumProof) bytes"))
            }
            // A receipt is base64 of PKCS #7 (DER: a SEQUENCE of a long length, "MI...").
            if !value.hasPrefix("MI") || value.utf8.count < 64 || Data(base64Encoded: value) == nil {
                return .failure(
                    Refusal(message: "the proof is neither an original transaction id, a signed transaction nor a base64 receipt"))
            }
        }
        if let bundleId, publisher.app(bundleId: bundleId) == nil {
            return .failure(Refusal(message: "publisher \(publisher.id) has no app \(bundleId)"))
        }
        return .success(ImportLine(line: number, customer: customer, proof: proof, bundleId: bundleId))
    }
}
