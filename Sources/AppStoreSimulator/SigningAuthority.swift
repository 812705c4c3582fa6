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

    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    /// Mints a new authority with fresh keys.
    public init(options: Options = Options()) throws {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName {
            OrganizationName("Entitle")
            CommonName("\(options.commonNamePrefix) Root CA")
        }
        let intermediateName = try DistinguishedName {
            OrganizationName("Entitle")
            CommonName("\(options.commonNamePrefix) Intermediate CA")
        }
        let leafName = try DistinguishedName {
            OrganizationName("Entitle")
            CommonName("\(options.commonNamePrefix) Signing")
        }
        let ocsp: [Certificate.Extension] =
            try options.ocspResponder.map { url in
                [
                    try Certificate.Extension(
                        AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(url))]),
                        critical: false)
                ]
            } ?? []
        root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey),
            notValidBefore: options.notValidBefore, notValidAfter: options.notValidAfter,
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions([
                try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: nil), critical: true),
                try Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true),
            ]),
            issuerPrivateKey: .init(rootKey))
        intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey),
            notValidBefore: options.notValidBefore, notValidAfter: options.notValidAfter,
            issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions(
                [
                    try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: 0), critical: true),
                    try Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true),
                ] + (options.intermediateMarker ? [Self.marker(Self.intermediateMarker)] : []) + ocsp),
            issuerPrivateKey: .init(rootKey))
        leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey),
            notValidBefore: options.notValidBefore, notValidAfter: options.notValidAfter,
            issuer: intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions(
                [
                    try Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
                    try Certificate.Extension(KeyUsage(digitalSignature: true), critical: true),
                ] + (options.leafMarker ? [Self.marker(Self.leafMarker)] : []) + ocsp),
            issuerPrivateKey: .init(intermediateKey))
        self.leafKey = leafKey
    }

    /// The root in DER, as `GET /simulator/root.cer` serves it.
    public var rootDER: [UInt8] {
        get throws {
            var serializer = DER.Serializer()
            try serializer.serialize(root)
            return serializer.serializedBytes
        }
    }

    /// Signs `payload` (JSON) as a compact JWS with header `{"alg":"ES256","x5c":[leaf, intermediate, root]}`.
    ///
    /// - Parameter chain: override the `x5c` certificates (tests of broken chains).
    /// - Parameter algorithm: override `alg` (tests of refused algorithms).
    public func sign(payload: [UInt8], chain: [Certificate]? = nil, algorithm: String = "ES256") throws -> String {
        let certificates = try (chain ?? [leaf, intermediate, root]).map { certificate -> String in
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return Data(serializer.serializedBytes).base64EncodedString()
        }
        let header = try JSONSerialization.data(withJSONObject: ["alg": algorithm, "x5c": certificates], options: [.sortedKeys])
        let signingInput = Self.base64URL(header) + "." + Self.base64URL(payload)
        let signature = try leafKey.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Self.base64URL(signature.rawRepresentation)
    }

    /// Signs an `Encodable` payload (encoded with Apple's conventions: dates as milliseconds).
    public func sign(_ payload: some Encodable, chain: [Certificate]? = nil) throws -> String {
        try sign(payload: Array(JSONEncoder().encode(payload)), chain: chain)
    }

    static func base64URL<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var text = Data(bytes).base64EncodedString()
        text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }

    private static func marker(_ oid: ASN1ObjectIdentifier) -> Certificate.Extension {
        // Apple's markers carry an ASN.1 NULL.
        Certificate.Extension(oid: oid, critical: false, value: [0x05, 0x00])
    }
}
