import Crypto
import Foundation
import SwiftASN1
import X509

/// The certificates the local APNs makes at start: a certificate authority (P-256, self-signed)
/// and, signed by it, the server's certificate for `127.0.0.1` and `localhost`. Clients trust the
/// authority alone, as providers trust Apple's; nothing is written to disk.
struct ServerCertificates: Sendable {
    /// The authority's certificate, PEM.
    let authorityPEM: String
    /// The server's certificate, DER.
    let serverDER: [UInt8]
    /// The server's private key, PEM.
    let serverKeyPEM: String

    init(now: Date = Date()) throws {
        let authorityKey = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let serverKey = P256.Signing.PrivateKey()
        let authorityName = try DistinguishedName {
            OrganizationName("Entitle")
            CommonName("Entitle Local APNs CA")
        }
        let serverName = try DistinguishedName {
            OrganizationName("Entitle")
            CommonName("localhost")
        }
        // An hour back for clocks out of step; a year ahead outlasts any run.
        let notValidBefore = now.addingTimeInterval(-3600)
        let notValidAfter = now.addingTimeInterval(365 * 86_400)
        let authorityKeyId = SubjectKeyIdentifier(hash: authorityKey.publicKey).keyIdentifier

        let authority = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: authorityKey.publicKey,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter,
            issuer: authorityName, subject: authorityName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions([
                try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: 0), critical: true),
                try Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true),
                try Certificate.Extension(SubjectKeyIdentifier(keyIdentifier: authorityKeyId), critical: false),
            ]),
            issuerPrivateKey: authorityKey)

        let serverPublicKey = Certificate.PublicKey(serverKey.publicKey)
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: serverPublicKey,
            notValidBefore: notValidBefore, notValidAfter: notValidAfter,
            issuer: authorityName, subject: serverName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions([
                try Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
                try Certificate.Extension(KeyUsage(digitalSignature: true), critical: true),
                try Certificate.Extension(ExtendedKeyUsage([.serverAuth]), critical: false),
                try Certificate.Extension(
                    SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))]),
                    critical: false),
                try Certificate.Extension(SubjectKeyIdentifier(hash: serverPublicKey), critical: false),
                try Certificate.Extension(AuthorityKeyIdentifier(keyIdentifier: authorityKeyId), critical: false),
            ]),
            issuerPrivateKey: authorityKey)

        authorityPEM = try authority.serializeAsPEM().pemString
        var serializer = DER.Serializer()
        try serializer.serialize(server)
        serverDER = serializer.serializedBytes
        serverKeyPEM = serverKey.pemRepresentation
    }
}
