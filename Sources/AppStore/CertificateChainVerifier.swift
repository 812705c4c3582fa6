import Crypto
import Foundation
import Synchronization
@_spi(DisableValidityCheck) import X509

/// Checks that certificates chain to a trusted root with Apple's shape, and remembers chains
/// it has accepted, so that a repeat costs a dictionary lookup and a date comparison.
///
/// A cached chain is stored with the window in which every certificate of it is valid, so a
/// cached answer is still checked against each verification time.
public final class CertificateChainVerifier: Sendable {
    /// A chain that verified.
    public struct VerifiedChain: Sendable {
        /// The leaf (signing) certificate.
        public let leaf: Certificate
        /// The leaf's key, when it is P-256 (JWS signers).
        let leafP256Key: P256.Signing.PublicKey?
        /// The latest `notValidBefore` and the earliest `notValidAfter` of the chain.
        public let validFrom: Date
        public let validUntil: Date
        /// When the cache must forget this chain (revocation answers age).
        let cachedUntil: Date
    }

    private let roots: CertificateStore
    private let revocationChecker: RevocationChecker?
    private let cache = Mutex<[String: VerifiedChain]>([:])
    private let cacheCapacity: Int

    /// - Parameters:
    ///   - roots: the trusted roots; Apple Root CA - G3 for signed data.
    ///   - revocationChecker: set to check OCSP for every new chain (off by default).
    public init(roots: [Certificate], revocationChecker: RevocationChecker? = nil, cacheCapacity: Int = 128) {
        self.roots = CertificateStore(roots)
        self.revocationChecker = revocationChecker
        self.cacheCapacity = cacheCapacity
    }

    /// The chain cached under `cacheKey`, checked against `time`; `nil` when not cached.
    public func cachedChain(for cacheKey: String, at time: Date) throws(AppStoreError) -> VerifiedChain? {
        guard let hit = cache.withLock({ $0[cacheKey] }), hit.cachedUntil > Date() else { return nil }
        try Self.checkValidity(hit, at: time)
        return hit
    }

    /// Verifies `leaf` (through `intermediates`) at `time`.
    ///
    /// - Parameters:
    ///   - cacheKey: the exact encoded certificates, which identify the chain; `nil` skips the cache.
    ///   - appleShape: require three certificates and Apple's marker extensions.
    public func verify(
        leaf: Certificate, intermediates: [Certificate], at time: Date, cacheKey: String?, appleShape: Bool = true
    ) async throws(AppStoreError) -> VerifiedChain {
        if let cacheKey, let hit = try cachedChain(for: cacheKey, at: time) { return hit }
        let chain = try await build(leaf: leaf, intermediates: intermediates, appleShape: appleShape)
        var onlineUntil = Date.distantFuture
        if let revocationChecker {
            try await revocationChecker.check(chain: chain, roots: roots)
            onlineUntil = Date().addingTimeInterval(revocationChecker.answerLifetime)
        }
        let verified = VerifiedChain(
            leaf: leaf,
            leafP256Key: P256.Signing.PublicKey(leaf.publicKey),
            validFrom: chain.map(\.notValidBefore).max() ?? .distantPast,
            validUntil: chain.map(\.notValidAfter).min() ?? .distantFuture,
            cachedUntil: onlineUntil
        )
        try Self.checkValidity(verified, at: time)
        if let cacheKey {
            cache.withLock { cache in
                // Chains are few (Apple rotates leaves yearly); a full cache means junk, so start over.
                if cache.count >= cacheCapacity { cache.removeAll(keepingCapacity: true) }
                cache[cacheKey] = verified
            }
        }
        return verified
    }

    private func build(
        leaf: Certificate, intermediates: [Certificate], appleShape: Bool
    ) async throws(AppStoreError)
        -> [Certificate]
    {
        // Validity is checked separately against the window, so that the cached answer holds for any time.
        var verifier = Verifier(rootCertificates: roots) {
            RFC5280Policy.withValidityCheckDisabled()
            if appleShape {
                AppleCertificatePolicy()
            }
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(intermediates))
        switch result {
        case .validCertificate(let chain):
            return Array(chain)
        case .couldNotValidate(let failures):
            let reason = failures.first.map { "\($0.policyFailureReason)" } ?? "no path to a trusted root certificate"
            throw AppStoreError(.invalidCertificateChain, "certificate chain not trusted: \(reason)")
        }
    }

    static func checkValidity(_ chain: VerifiedChain, at time: Date) throws(AppStoreError) {
        guard time >= chain.validFrom, time <= chain.validUntil else {
            throw AppStoreError(
                .certificateExpired,
                "a certificate of the chain is not valid at \(time.formatted(.iso8601)) "
                    + "(the chain is valid \(chain.validFrom.formatted(.iso8601)) to \(chain.validUntil.formatted(.iso8601)))"
            )
        }
    }
}
