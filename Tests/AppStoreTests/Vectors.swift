import Foundation
import X509

/// The real Apple data in `Tests/Vectors` (copied from `../shared/vectors`; see its PROVENANCE.md).
enum Vectors {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Vectors")

    static func url(_ path: String) -> URL { folder.appendingPathComponent(path) }

    static func bytes(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: url(path))) }

    static func text(_ path: String) throws -> String {
        String(decoding: try Data(contentsOf: url(path)), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func certificate(_ path: String) throws -> Certificate { try Certificate(derEncoded: try bytes(path)) }

    /// Seconds since 1970 as a `Date`.
    static func date(_ seconds: Double) -> Date { Date(timeIntervalSince1970: seconds) }
}
