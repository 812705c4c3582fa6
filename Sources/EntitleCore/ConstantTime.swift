import Crypto

/// Comparing secrets without telling, through timing, how much of them matched or how long
/// the expected one is: both sides are hashed, and the two fixed-length digests compared
/// with every byte visited.
package enum ConstantTime {
    package static func equal(_ a: some StringProtocol, _ b: some StringProtocol) -> Bool {
        equal(SHA256.hash(data: Array(a.utf8)), SHA256.hash(data: Array(b.utf8)))
    }

    /// Digests compared byte for byte, all 32 of them.
    package static func equal(_ a: SHA256Digest, _ b: SHA256Digest) -> Bool {
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }

    /// Whether `candidate` is one of `secrets`, comparing with every one of them (an early
    /// exit would tell which position matched).
    package static func matchesAny(_ candidate: some StringProtocol, _ secrets: [Secret]) -> Bool {
        let digest = SHA256.hash(data: Array(candidate.utf8))
        var found = false
        for secret in secrets where equal(digest, SHA256.hash(data: Array(secret.value.utf8))) { found = true }
        return found
    }
}
