import Crypto
import Foundation
import SwiftASN1
import X509
import _CryptoExtras

/// The RSA chain that signs legacy app receipts, shaped like Apple's (root, intermediate
/// with 1.2.840.113635.100.6.2.1, leaf with 1.2.840.113635.100.6.11.1), and the PKCS#7
/// SignedData container receipts travel in.
public struct ReceiptSigningAuthority: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    private let leafKey: _RSA.Signing.PrivateKey

    /// Mints a new authority with fresh 2048-bit keys.
    public init() throws {
        let leafKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let chain = try CertificateChainMinter.mint(
            keys: .init(
                root: .init(try _RSA.Signing.PrivateKey(keySize: .bits2048)),
                intermediate: .init(try _RSA.Signing.PrivateKey(keySize: .bits2048)), leaf: .init(leafKey)),
            options: .init(
                notValidBefore: Date(timeIntervalSince1970: 1_600_000_000), notValidAfter: Date(timeIntervalSince1970: 2_200_000_000),
                commonNamePrefix: "Entitle Simulator Receipt", signatureAlgorithm: .sha256WithRSAEncryption,
                intermediateExtensions: [CertificateChainMinter.marker(CertificateChainMinter.intermediateMarker)],
                leafExtensions: [CertificateChainMinter.marker(CertificateChainMinter.leafMarker)]))
        try self.init(root: chain.root, intermediate: chain.intermediate, leaf: chain.leaf, leafKey: leafKey)
    }

    public init(root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: _RSA.Signing.PrivateKey) throws {
        guard leaf.publicKey == Certificate.PublicKey(leafKey.publicKey) else {
            throw SimulatorError(.invalidConfiguration, "the receipt signing key does not belong to the leaf certificate")
        }
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
    }

    /// Loads the authority kept in `directory` (`receipt-*.pem`), or mints one and keeps it there.
    public init(directory: URL) throws {
        if let stored = try CertificateChainMinter.load(from: directory, prefix: "receipt") {
            try self.init(
                root: stored.chain[0], intermediate: stored.chain[1], leaf: stored.chain[2],
                leafKey: try _RSA.Signing.PrivateKey(pemRepresentation: stored.leafKeyPEM))
        } else {
            try self.init()
            try CertificateChainMinter.write(
                root: root, intermediate: intermediate, leaf: leaf, leafKeyPEM: leafKey.pemRepresentation, to: directory, prefix: "receipt")
        }
    }

    /// The root in DER, as `GET /simulator/receipt-root.cer` serves it.
    public var rootDER: [UInt8] {
        get throws { try CertificateChainMinter.der(root) }
    }

    /// Wraps `content` (a receipt payload) in PKCS#7 SignedData: SHA-256 with RSA (PKCS#1
    /// v1.5) over the content itself, no signed attributes, the leaf and intermediate included.
    /// - Parameter extra: more certificates to carry after those two (a hostile receipt's, in tests).
    public func sign(content: [UInt8], carrying extra: [Certificate] = []) throws -> [UInt8] {
        let sha256 = DERWriter.sequence([DERWriter.objectIdentifier([2, 16, 840, 1, 101, 3, 4, 2, 1]), DERWriter.null])
        let rsaEncryption = DERWriter.sequence([DERWriter.objectIdentifier([1, 2, 840, 113549, 1, 1, 1]), DERWriter.null])
        let signature = try leafKey.signature(for: SHA256.hash(data: content), padding: .insecurePKCS1v1_5)
        var issuer = DER.Serializer()
        try issuer.serialize(leaf.issuer)
        let signerInfo = DERWriter.sequence([
            DERWriter.integer(1),
            DERWriter.sequence([issuer.serializedBytes, DERWriter.tlv(0x02, Array(leaf.serialNumber.bytes))]),
            sha256, rsaEncryption, DERWriter.octetString(Array(signature.rawRepresentation)),
        ])
        let signedData = DERWriter.sequence([
            DERWriter.integer(1),
            DERWriter.set([sha256]),
            DERWriter.sequence([
                DERWriter.objectIdentifier([1, 2, 840, 113549, 1, 7, 1]), DERWriter.tlv(0xA0, DERWriter.octetString(content)),
            ]),
            DERWriter.tlv(0xA0, try ([leaf, intermediate] + extra).flatMap(CertificateChainMinter.der)),
            DERWriter.set([signerInfo]),
        ])
        return DERWriter.sequence([DERWriter.objectIdentifier([1, 2, 840, 113549, 1, 7, 2]), DERWriter.tlv(0xA0, signedData)])
    }
}
