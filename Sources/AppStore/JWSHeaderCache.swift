import Foundation
import Synchronization

/// The JWS headers a verifier has seen, by their exact bytes, with the chain each one's `x5c`
/// verified to.
///
/// Apple signs every transaction of a period with the same few certificates, so nearly every
/// header a server sees is one it has seen before (about 3.9 KB of base64url with three
/// certificates). Comparing its bytes with the ones seen costs far less than decoding and
/// parsing it again and hashing its certificates to find their chain. A header is kept only
/// once it parsed and its algorithm passed; a chain only once it verified, and it is still
/// checked against each payload's time and the chain's cache lifetime.
final class JWSHeaderCache: Sendable {
    struct Entry: Sendable {
        let bytes: [UInt8]
        let header: CompactJWS.Header
        var chain: CertificateChainVerifier.VerifiedChain?
    }

    private let entries = Mutex<[Entry]>([])
    private let capacity: Int

    init(capacity: Int = 16) { self.capacity = capacity }

    /// The entry for a header with exactly these bytes.
    func entry(for bytes: UnsafeBufferPointer<UInt8>) -> Entry? {
        entries.withLock { entries in
            entries.first { entry in
                entry.bytes.count == bytes.count && entry.bytes.withUnsafeBufferPointer { Self.same($0, bytes) }
            }
        }
    }

    private static func same(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let left = a.baseAddress, let right = b.baseAddress else { return a.count == 0 }
        return memcmp(left, right, a.count) == 0
    }

    /// Keeps a parsed header (the oldest goes when full).
    func keep(_ header: CompactJWS.Header, bytes: UnsafeBufferPointer<UInt8>) {
        let entry = Entry(bytes: Array(bytes), header: header)
        entries.withLock { entries in
            guard !entries.contains(where: { $0.bytes == entry.bytes }) else { return }
            if entries.count >= capacity { entries.removeFirst() }
            entries.append(entry)
        }
    }

    /// Remembers the chain a kept header's certificates verified to.
    func keep(_ chain: CertificateChainVerifier.VerifiedChain, forHeader bytes: [UInt8]) {
        entries.withLock { entries in
            if let index = entries.firstIndex(where: { $0.bytes == bytes }) { entries[index].chain = chain }
        }
    }
}
