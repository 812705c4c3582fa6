import Deflate
import Foundation

extension StoredCustomer {
    /// What a customer's hash holds besides its outbox, in the layout written: the version,
    /// the ids of its lifecycle events in the log, the fence of every transaction whose lock
    /// holder wrote it, and the document.
    ///
    /// The packed layout keeps all four in the hash's `doc` field:
    ///
    ///     VERSION \n EVENT-ID EVENT-ID ... \n T=TOKEN T=TOKEN ... \n DOCUMENT
    ///
    /// (`T` an original transaction id as `fenceName` escapes it, `DOCUMENT` as
    /// `StoredCustomer.encode` writes it). One field instead of four: a hash entry costs Redis
    /// about 60 to 90 bytes besides what it holds (bench/README.md, "What a purchase costs").
    /// It starts with a digit, where the older layout's `doc` (the document alone) starts
    /// with `{`: a version that knows only that layout cannot read it and says so, instead of
    /// taking the customer for a new one. The compare-and-set script
    /// (`EntitlementStore.compareAndSet`) reads and writes it; this type reads it for everyone
    /// else.
    package struct Record: Sendable, Equatable {
        package var version: Int
        /// The event ids, space-separated, oldest first.
        package var events: String
        /// Escaped transaction id -> the highest fencing token that wrote (packed layout only).
        package var fences: [String: Int]
        package var document: String

        /// The record as the hash's fields show it: `doc` packed, or in the older layout the
        /// document alone with the fields `v` and `ev`; `nil` when the customer has no document.
        package init?(stored: String?, version: String? = nil, events: String? = nil) throws {
            guard let stored else { return nil }
            if Self.isPacked(stored) {
                self = try Self(packed: stored)
            } else {
                self.init(version: version.flatMap { Int($0) } ?? 0, events: events ?? "", fences: [:], document: stored)
            }
        }

        /// Whether a stored `doc` is the packed record (it starts with its version).
        package static func isPacked(_ stored: String) -> Bool {
            guard let first = stored.utf8.first else { return false }
            return (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first)
        }

        package init(version: Int, events: String, fences: [String: Int], document: String) {
            self.version = version
            self.events = events
            self.fences = fences
            self.document = document
        }

        /// Reads the packed `doc`.
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

        /// The packed `doc` for this record (the script writes it; the tests compare).
        package var packed: String {
            let pairs = fences.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            return "\(version)\n\(events)\n\(pairs)\n\(document)"
        }

        /// A transaction id as the packed record names its fence: percent-escaped outside
        /// letters, digits, `.`, `_` and `-`, so that no id (they come from Apple, imports and
        /// publishers) can break the record's spaces, `=` and lines. Apple's ids are digits and
        /// read as they are, so the name is also the older layout's `fence:T` suffix.
        /// The empty id is `%`, which no escaped id can be, so that it still has a fence.
        package static func fenceName(_ originalTransactionId: String) -> String {
            guard !originalTransactionId.isEmpty else { return "%" }
            // Apple's ids are digits: most names are the id as it is, found without Foundation.
            if originalTransactionId.utf8.allSatisfy({ byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default: false
                }
            }) {
                return originalTransactionId
            }
            return originalTransactionId.addingPercentEncoding(withAllowedCharacters: fenceNameCharacters) ?? originalTransactionId
        }

        static let fenceNameCharacters = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

        static func malformed(_ why: String) -> Deflate.Failure {
            Deflate.Failure(description: "the customer's packed record cannot be read: \(why)")
        }
    }

    /// Which fields the customer's hash is written in; both are always read.
    package enum Layout: String, Sendable {
        /// One field `doc` (`Record`): the deflated format's.
        case packed
        /// `doc`, `v`, `ev` and `fence:T`, as versions before the packed record wrote.
        case fields
    }
}

extension StoredCustomer.Format {
    /// The hash layout written with this format: plain JSON is for a rolling upgrade from a
    /// version that reads only the older fields, so it writes them too.
    package var layout: StoredCustomer.Layout { self == .json ? .fields : .packed }
}
