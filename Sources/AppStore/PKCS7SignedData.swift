import SwiftASN1
import X509

/// A PKCS#7 / CMS SignedData container as Apple wraps receipts in it, parsed from BER
/// (Xcode writes indefinite lengths). Nothing in it is trusted until ``AppReceiptVerifier`` says so.
struct PKCS7SignedData {
    /// The signed content (the receipt payload).
    let content: [UInt8]
    /// Every certificate carried in the container, and each one's DER.
    let certificates: [Certificate]
    let certificateDER: [[UInt8]]
    /// The certificate whose issuer and serial number the signer names, and its DER.
    let signer: Certificate
    let signerDER: [UInt8]
    let digestAlgorithm: ASN1ObjectIdentifier
    let signatureAlgorithm: ASN1ObjectIdentifier
    let signature: [UInt8]
    /// The DER of the signed attributes as a SET, when the signer used them.
    let signedAttributes: [UInt8]?
    /// The `messageDigest` signed attribute, when present.
    let messageDigest: [UInt8]?

    /// The most certificates a container may carry (Apple's receipts carry three).
    static let maximumCertificates = 8

    static let signedDataType: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 7, 2]
    static let messageDigestAttribute: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 9, 4]

    init(berEncoded bytes: [UInt8]) throws(AppStoreError) {
        do {
            let top = try Self.children(of: try BER.parse(bytes))
            guard top.count >= 2, try ASN1ObjectIdentifier(berEncoded: top[0]) == Self.signedDataType,
                let signedDataNode = try Self.children(of: top[1]).first
            else { throw AppStoreError(.invalidFormat, "not a PKCS#7 SignedData container") }
            // version, digestAlgorithms, encapContentInfo, [0] certificates, [1] crls, signerInfos
            let signedData = try Self.children(of: signedDataNode)
            guard signedData.count >= 4 else { throw Self.malformed("SignedData is incomplete") }
            let encapsulated = try Self.children(of: signedData[2])
            guard encapsulated.count == 2, let octets = try Self.children(of: encapsulated[1]).first else {
                throw Self.malformed("the receipt content is missing")
            }
            content = try Self.octetString(octets)

            var certificates: [Certificate] = []
            var certificateDER: [[UInt8]] = []
            var signerInfos: ASN1Node?
            for node in signedData.dropFirst(3) {
                if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                    for certificateNode in try Self.children(of: node) {
                        // Apple's carry three: more is junk, not worth parsing.
                        guard certificates.count < Self.maximumCertificates else {
                            throw Self.malformed("more than \(Self.maximumCertificates) certificates")
                        }
                        let der = Array(certificateNode.encodedBytes)
                        certificates.append(try Certificate(derEncoded: der))
                        certificateDER.append(der)
                    }
                } else if node.identifier == ASN1Identifier.set {
                    signerInfos = node
                }
            }
            self.certificates = certificates
            self.certificateDER = certificateDER
            guard let signerInfos, let signerInfo = try Self.children(of: signerInfos).first else {
                throw Self.malformed("no signer")
            }

            // version, sid, digestAlgorithm, [0] signedAttrs, signatureAlgorithm, signature, [1] unsignedAttrs
            var signerNodes = try Self.children(of: signerInfo)[...]
            guard signerNodes.count >= 5 else { throw Self.malformed("the signer is incomplete") }
            signerNodes.removeFirst()
            let identifier = signerNodes.removeFirst()
            guard identifier.identifier == ASN1Identifier.sequence else {
                throw Self.malformed("the signer is not named by issuer and serial number")
            }
            let identifierNodes = try Self.children(of: identifier)
            guard identifierNodes.count == 2 else {
                throw Self.malformed("the signer's issuer and serial number are incomplete")
            }
            let issuer = try DistinguishedName(derEncoded: Array(identifierNodes[0].encodedBytes))
            let serial = Certificate.SerialNumber(bytes: try Self.primitive(identifierNodes[1]))
            guard let signerIndex = certificates.firstIndex(where: { $0.issuer == issuer && $0.serialNumber == serial }) else {
                throw Self.malformed("the signing certificate is not in the container")
            }
            self.signer = certificates[signerIndex]
            self.signerDER = certificateDER[signerIndex]

            digestAlgorithm = try Self.algorithm(signerNodes.removeFirst())
            var signedAttributes: [UInt8]?
            var messageDigest: [UInt8]?
            if let attributes = signerNodes.first,
                attributes.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
            {
                signerNodes.removeFirst()
                // Signed over as a DER SET: the same bytes with the universal SET tag.
                var encoded = Array(attributes.encodedBytes)
                encoded[0] = 0x31
                signedAttributes = encoded
                for attribute in try Self.children(of: attributes) {
                    let parts = try Self.children(of: attribute)
                    if parts.count == 2, try ASN1ObjectIdentifier(berEncoded: parts[0]) == Self.messageDigestAttribute,
                        let value = try Self.children(of: parts[1]).first
                    {
                        messageDigest = try Self.octetString(value)
                    }
                }
            }
            self.signedAttributes = signedAttributes
            self.messageDigest = messageDigest
            guard signerNodes.count >= 2 else { throw Self.malformed("no signature") }
            signatureAlgorithm = try Self.algorithm(signerNodes.removeFirst())
            signature = try Self.octetString(signerNodes.removeFirst())
        } catch let error as AppStoreError {
            throw error
        } catch {
            throw AppStoreError(.invalidFormat, "not a PKCS#7 receipt: \(error)")
        }
    }

    private static func malformed(_ what: String) -> AppStoreError {
        AppStoreError(.invalidFormat, "malformed PKCS#7 receipt: \(what)")
    }

    static func children(of node: ASN1Node) throws -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else {
            throw AppStoreError(.invalidFormat, "malformed ASN.1: expected a constructed value")
        }
        return Array(nodes)
    }

    static func primitive(_ node: ASN1Node) throws -> ArraySlice<UInt8> {
        guard case .primitive(let bytes) = node.content else {
            throw AppStoreError(.invalidFormat, "malformed ASN.1: expected a primitive value")
        }
        return bytes
    }

    /// The bytes of an OCTET STRING, including BER's constructed (chunked) form.
    static func octetString(_ node: ASN1Node) throws -> [UInt8] {
        switch node.content {
        case .primitive(let bytes):
            return Array(bytes)
        case .constructed(let chunks):
            var bytes: [UInt8] = []
            for chunk in chunks { bytes += try octetString(chunk) }
            return bytes
        }
    }

    private static func algorithm(_ node: ASN1Node) throws -> ASN1ObjectIdentifier {
        guard let oid = try children(of: node).first else { throw malformed("empty algorithm identifier") }
        return try ASN1ObjectIdentifier(berEncoded: oid)
    }
}
