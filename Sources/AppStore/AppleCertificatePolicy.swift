import SwiftASN1
import X509

/// The shape Apple's signing chains have: exactly leaf, intermediate and root, with Apple's
/// marker extensions on the intermediate and the leaf.
struct AppleCertificatePolicy: VerifierPolicy {
    /// Apple Worldwide Developer Relations intermediate marker.
    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    /// Mac App Store and iTunes Store receipt signing leaf marker.
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    // Apple does not mark them critical, but if it ever does, this policy is what checks them.
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [Self.intermediateMarker, Self.leafMarker]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(reason: "an Apple chain has three certificates, this one has \(chain.count)")
        }
        guard chain[0].extensions[oid: Self.leafMarker] != nil else {
            return .failsToMeetPolicy(reason: "the leaf certificate lacks Apple's signing marker (1.2.840.113635.100.6.11.1)")
        }
        guard chain[1].extensions[oid: Self.intermediateMarker] != nil else {
            return .failsToMeetPolicy(
                reason: "the intermediate certificate lacks Apple's WWDR marker (1.2.840.113635.100.6.2.1)")
        }
        return .meetsPolicy
    }
}
