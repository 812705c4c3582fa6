import AppStore
import Crypto
import Foundation
import SwiftASN1
import X509

/// A certificate authority shaped like Apple's StoreKit 2 signing chain: an EC P-256 root,
/// an intermediate carrying 1.2.840.113635.100.6.2.1 and a leaf carrying
/// 1.2.840.113635.100.6.11.1. It signs JWS the way the App Store does (ES256, `x5c` of three).
///
/// The simulator signs with it, and tests build the broken variants Apple never sends
/// (missing markers, expired or two-certificate chains) from its options.
public struct SigningAuthority: Sendable {
    /// What to mint; the defaults are Apple's shape.
    public struct Options: Sendable {
        public var notValidBefore = Date(timeIntervalSince1970: 1_600_000_000)
        public var notValidAfter = Date(timeIntervalSince1970: 2_200_000_000)
        /// Put Apple's marker on the intermediate.
        public var intermediateMarker = true
        /// Put Apple's marker on the leaf.
        public var leafMarker = true
        /// An OCSP responder URL to name in the leaf and intermediate.
        public var ocspResponder: String?
        public var commonNamePrefix = "Entitle Simulator"

        public init() {}
    }

    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    private let leafKey: P256.Signing.PrivateKey
    /// The default header (`ES256`, this chain), base64url-encoded: every signature the
    /// simulator makes carries it, and serializing its three certificates each time was
    /// most of a signature's cost.
    private let encodedHeader: String

    /// Mints a new authority with fresh keys.
    public init(options: Options = Options()) throws {
        let leafKey = P256.Signing.PrivateKey()
        let ocsp: [Certificate.Extension] =
            try options.ocspResponder.map { url in
                [
                    try Certificate.Extension(
                        AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(url))]),
                        critical: false)
                ]
            } ?? []
        let chain = try CertificateChainMinter.mint(
            keys: .init(root: .init(P256.Signing.PrivateKey()), intermediate: .init(P256.Signing.PrivateKey()), leaf: .init(leafKey)),
            options: .init(
                notValidBefore: options.notValidBefore, notValidAfter: options.notValidAfter,
                commonNamePrefix: options.commonNamePrefix, signatureAlgorithm: .ecdsaWithSHA256,
                intermediateExtensions: (options.intermediateMarker
                    ? [CertificateChainMinter.marker(CertificateChainMinter.intermediateMarker)] : [])
                    + ocsp,
                leafExtensions: (options.leafMarker ? [CertificateChainMinter.marker(CertificateChainMinter.leafMarker)] : []) + ocsp))
        try self.init(root: chain.root, intermediate: chain.intermediate, leaf: chain.leaf, leafKey: leafKey)
    }

    /// An authority from existing certificates and the leaf's key.
    public init(root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: P256.Signing.PrivateKey) throws {
        guard leaf.publicKey == Certificate.PublicKey(leafKey.publicKey) else {
            throw SimulatorError(.invalidConfiguration, "the signing key does not belong to the leaf certificate")
        }
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
        self.encodedHeader = try Self.header(
            algorithm: "ES256",
            certificates: [leaf, intermediate, root].map { Data(try CertificateChainMinter.der($0)).base64EncodedString() })
    }

    /// Loads the authority kept in `directory` (`signing-*.pem`), or mints one and keeps it
    /// there, so that verifiers configured with its root keep working across restarts.
    public init(directory: URL) throws {
        if let stored = try CertificateChainMinter.load(from: directory, prefix: "signing") {
            try self.init(
                root: stored.chain[0], intermediate: stored.chain[1], leaf: stored.chain[2],
                leafKey: try P256.Signing.PrivateKey(pemRepresentation: stored.leafKeyPEM))
        } else {
            try self.init()
            try CertificateChainMinter.write(
                root: root, intermediate: intermediate, leaf: leaf, leafKeyPEM: leafKey.pemRepresentation, to: directory, prefix: "signing")
        }
    }

    /// The root in DER, as `GET /simulator/root.cer` serves it.
    public var rootDER: [UInt8] {
        get throws { try CertificateChainMinter.der(root) }
    }

    /// Signs `payload` (JSON) as a compact JWS with header `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
    ///
    /// - Parameter chain: override the `x5c` certificates (tests of broken chains).
    /// - Parameter algorithm: override `alg` (tests of refused algorithms).
    public func sign(payload: [UInt8], chain: [Certificate]? = nil, algorithm: String = "ES256") throws -> String {
        let header =
            if chain == nil && algorithm == "ES256" {
                encodedHeader
            } else {
                try Self.header(
                    algorithm: algorithm,
                    certificates: try (chain ?? [leaf, intermediate, root]).map {
                        Data(try CertificateChainMinter.der($0)).base64EncodedString()
                    })
            }
        let signingInput = header + "." + AppleBase64.encodeURL(payload)
        let signature = try leafKey.signature(for: Data(signingInput.utf8))
        return signingInput + "." + AppleBase64.encodeURL(signature.rawRepresentation)
    }

    /// A JWS header naming `algorithm` and carrying `certificates` (base64 DER), base64url-encoded.
    private static func header(algorithm: String, certificates: [String]) throws -> String {
        AppleBase64.encodeURL(try JSONSerialization.data(withJSONObject: ["alg": algorithm, "x5c": certificates], options: [.sortedKeys]))
    }

    /// Signs an `Encodable` payload (encoded with Apple's conventions: dates as milliseconds).
    public func sign(_ payload: some Encodable, chain: [Certificate]? = nil) throws -> String {
        try sign(payload: Array(JSONEncoder().encode(payload)), chain: chain)
    }
}
