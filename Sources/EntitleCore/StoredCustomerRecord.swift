import Foundation

extension StoredCustomer {
    /// What a customer's hash holds besides its outbox, in the layout written: the version,
    /// the ids of its lifecycle events in the log, the fence of every transaction whose lock
    /// holder wrote it, and the document.
    ///
    /// The packed layout keeps all four in one field, `d`:
    ///
    ///     VERSION \n EVENT-ID EVENT-ID ... \n T=TOKEN T=TOKEN ... \n DOCUMENT
    ///
    /// (`T` an original transaction id as `fenceName` escapes it, `DOCUMENT` as
    /// `StoredCustomer.encode` writes it). One field instead of four: a hash entry costs Redis
    /// about 60 to 90 bytes besides what it holds (bench/README.md, "What a purchase costs").
    /// The compare-and-set script (`EntitlementStore.compareAndSet`) reads and writes it; this
    /// type reads it for everyone else.
    package struct Record: Sendable, Equatable {
        package var version: Int
        /// The event ids, space-separated, oldest first.
        package var events: String
        /// Escaped transaction id -> the highest fencing token that wrote (packed layout only).
        package var fences: [String: Int]
        package var document: String

        /// The record as the hash's fields show it: the packed field `d` when there is one,
        /// else the fields older versions wrote (`doc`, `v`); `nil` when the customer has no
        /// document.
        package init?(packed: String?, document: String? = nil, version: String? = nil) throws {
            if let packed {
                self = try Self(packed: packed)
            } else if let document {
                self.init(version: version.flatMap { Int($0) } ?? 0, events: "", fences: [:], document: document)
            } else {
                return nil
            }
        }

        package init(version: Int, events: String, fences: [String: Int], document: String) {
            self.version = version
            self.events = events
            self.fences = fences
            self.document = document
        }

        /// Reads the packed field `d`.
        package init(packed: String) throws {
            var lines: [Substring] = []
            var rest = packed[...]
            for _ in 0..<3 {
                guard let newline = rest.firstIndex(of: "\n") else { throw Self.malformed("it has fewer than four lines") }
                lines.append(rest[..<newline])
                rest = rest[rest.index(after: newline)...]
            }
            guard let version = Int(lines[0]), version > 0 else { throw Self.malformed("its version is not a positive number") }
            var fences: [String: Int] = [:]
            for pair in lines[2].split(separator: " ") {
                guard let equals = pair.lastIndex(of: "="), let token = Int(pair[pair.index(after: equals)...]) else {
                    throw Self.malformed("a fence is not T=TOKEN")
                }
                fences[String(pair[..<equals])] = token
            }
            self.init(version: version, events: String(lines[1]), fences: fences, document: String(rest))
        }

        /// The packed field `d` for this record (the script writes it; the tests compare).
        package var packed: String {
            let pairs = fences.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            return "\(version)\n\(events)\n\(pairs)\n\(document)"
        }

        /// The customer's event ids, from the packed field or the older `ev` field.
        package static func events(packed: String?, listed: String?) throws -> String {
            if let packed { return try Record(packed: packed).events }
            return listed ?? ""
        }

        /// A transaction id as the packed record names its fence: percent-escaped outside
        /// letters, digits, `.`, `_` and `-`, so that no id (they come from Apple, imports and
        /// publishers) can break the record's spaces, `=` and lines. Apple's ids are digits and
        /// read as they are, so the name is also the older layout's `fence:T` suffix.
        package static func fenceName(_ originalTransactionId: String) -> String {
            originalTransactionId.addingPercentEncoding(withAllowedCharacters: fenceNameCharacters) ?? originalTransactionId
        }

        static let fenceNameCharacters = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

        static func malformed(_ why: String) -> Deflate.Failure {
            Deflate.Failure(description: "the customer's packed record cannot be read: \(why)")
        }
    }

    /// Which fields the customer's hash is written in; both are always read.
    package enum Layout: String, Sendable {
        /// One field `d` (`Record`): the deflated format's.
        case packed
        /// `doc`, `v`, `ev` and `fence:T`, as versions before the packed record wrote.
        case fields
    }
}

extension StoredCustomer.Format {
    /// The hash layout written with this format: plain JSON is for a rolling upgrade from a
    /// version that reads only the older fields, so it writes them too.
    package var layout: String { self == .json ? StoredCustomer.Layout.fields.rawValue : StoredCustomer.Layout.packed.rawValue }
}
