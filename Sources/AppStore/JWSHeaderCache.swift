import Foundation
import Synchronization

/// The JWS headers a verifier has seen, by their exact bytes, with the chain each one's `x5c`
/// verified to.
///
/// Apple signs every transaction of a period with the same few certificates, so nearly every
/// header a server sees is one it has seen before (about 3.9 KB of base64url with three
/// certificates). Comparing its bytes with the ones seen costs far less than decoding and
/// parsing it again and hashing its certificates to find their chain. A header is kept only
/// with a chain that verified, so headers that failed cannot push Apple's out; the least
/// recently used goes when full. The chain is still checked against each payload's time and
/// its cache lifetime.
final class JWSHeaderCache: Sendable {
    struct Entry: Sendable {
        let bytes: [UInt8]
        let header: CompactJWS.Header
        let chain: CertificateChainVerifier.VerifiedChain
    }

    private let entries = Mutex<[Entry]>([])
    private let capacity: Int

    init(capacity: Int = 16) { self.capacity = capacity }

    /// The entry for a header with exactly these bytes (now the most recently used).
    func entry(for bytes: UnsafeBufferPointer<UInt8>) -> Entry? {
        entries.withLock { entries in
            guard let index = entries.lastIndex(where: { entry in entry.bytes.withUnsafeBufferPointer { Self.same($0, bytes) } })
            else { return nil }
            let entry = entries[index]
            if index != entries.count - 1 {
                entries.remove(at: index)
                entries.append(entry)
            }
            return entry
        }
    }

    /// Keeps a header whose chain verified.
    func keep(_ header: CompactJWS.Header, bytes: [UInt8], chain: CertificateChainVerifier.VerifiedChain) {
        entries.withLock { entries in
            entries.removeAll { $0.bytes == bytes }
            if entries.count >= capacity { entries.removeFirst() }
            entries.append(Entry(bytes: bytes, header: header, chain: chain))
        }
    }

    private static func same(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let left = a.baseAddress, let right = b.baseAddress else { return a.count == 0 }
        return memcmp(left, right, a.count) == 0
    }
}
