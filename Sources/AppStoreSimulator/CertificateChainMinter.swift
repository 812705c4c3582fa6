import Crypto
import Foundation
import SwiftASN1
import X509

/// Mints a root, an intermediate and a leaf shaped like Apple's chains, for either key type
/// (P-256 for signed data, RSA for receipts), with the extensions strict verifiers
/// (OpenSSL's `X509_STRICT`, which Apple's Python library turns on) require: critical basic
/// constraints and key usage, and subject and authority key identifiers.
enum CertificateChainMinter {
    struct Keys {
        var root: Certificate.PrivateKey
        var intermediate: Certificate.PrivateKey
        var leaf: Certificate.PrivateKey
    }

    struct Options {
        var notValidBefore: Date
        var notValidAfter: Date
        var commonNamePrefix: String
        var signatureAlgorithm: Certificate.SignatureAlgorithm
        var intermediateExtensions: [Certificate.Extension] = []
        var leafExtensions: [Certificate.Extension] = []
    }

    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    /// Apple's markers carry an ASN.1 NULL.
    static func marker(_ oid: ASN1ObjectIdentifier) -> Certificate.Extension {
        Certificate.Extension(oid: oid, critical: false, value: [0x05, 0x00])
    }

    static func mint(keys: Keys, options: Options) throws -> (root: Certificate, intermediate: Certificate, leaf: Certificate) {
        func name(_ suffix: String) throws -> DistinguishedName {
            try DistinguishedName {
                OrganizationName("Entitle")
                CommonName("\(options.commonNamePrefix) \(suffix)")
            }
        }
        let rootName = try name("Root CA")
        let intermediateName = try name("Intermediate CA")
        let leafName = try name("Signing")

        func certificate(
            key: Certificate.PrivateKey, subject: DistinguishedName, issuer: DistinguishedName,
            issuerKey: Certificate.PrivateKey, extensions: [Certificate.Extension]
        ) throws -> Certificate {
            let identifiers = [
                try Certificate.Extension(SubjectKeyIdentifier(hash: key.publicKey), critical: false),
                try Certificate.Extension(
                    AuthorityKeyIdentifier(keyIdentifier: SubjectKeyIdentifier(hash: issuerKey.publicKey).keyIdentifier),
                    critical: false),
            ]
            return try Certificate(
                version: .v3, serialNumber: .init(), publicKey: key.publicKey,
                notValidBefore: options.notValidBefore, notValidAfter: options.notValidAfter,
                issuer: issuer, subject: subject, signatureAlgorithm: options.signatureAlgorithm,
                extensions: try Certificate.Extensions(extensions + identifiers), issuerPrivateKey: issuerKey)
        }

        let caUsage = try Certificate.Extension(KeyUsage(keyCertSign: true, cRLSign: true), critical: true)
        let root = try certificate(
            key: keys.root, subject: rootName, issuer: rootName, issuerKey: keys.root,
            extensions: [try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: nil), critical: true), caUsage])
        let intermediate = try certificate(
            key: keys.intermediate, subject: intermediateName, issuer: rootName, issuerKey: keys.root,
            extensions: [try Certificate.Extension(BasicConstraints.isCertificateAuthority(maxPathLength: 0), critical: true), caUsage]
                + options.intermediateExtensions)
        let leaf = try certificate(
            key: keys.leaf, subject: leafName, issuer: intermediateName, issuerKey: keys.intermediate,
            extensions: [
                try Certificate.Extension(BasicConstraints.notCertificateAuthority, critical: true),
                try Certificate.Extension(KeyUsage(digitalSignature: true), critical: true),
            ] + options.leafExtensions)
        return (root, intermediate, leaf)
    }

    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    // MARK: Files

    /// Reads `<prefix>-root.pem`, `<prefix>-intermediate.pem`, `<prefix>-leaf.pem` and
    /// `<prefix>-leaf-key.pem` from `directory`; `nil` when none of them exists.
    static func load(from directory: URL, prefix: String) throws -> (chain: [Certificate], leafKeyPEM: String)? {
        let names = ["root", "intermediate", "leaf", "leaf-key"].map { directory.appending(path: "\(prefix)-\($0).pem") }
        let present = names.filter { FileManager.default.fileExists(atPath: $0.path) }
        if present.isEmpty { return nil }
        guard present.count == names.count else {
            throw SimulatorError(
                .invalidConfiguration,
                "\(directory.path) has only some of \(prefix)-root.pem, -intermediate.pem, -leaf.pem, -leaf-key.pem")
        }
        let texts = try names.map { try String(contentsOf: $0, encoding: .utf8) }
        let chain = try texts[0..<3].map { try Certificate(pemEncoded: $0) }
        return ([chain[0], chain[1], chain[2]], texts[3])
    }

    /// Writes the chain and the leaf key (mode 0600) for `load(from:prefix:)`.
    static func write(
        root: Certificate, intermediate: Certificate, leaf: Certificate, leafKeyPEM: String, to directory: URL, prefix: String
    )
        throws
    {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for (suffix, certificate) in [("root", root), ("intermediate", intermediate), ("leaf", leaf)] {
            try certificate.serializeAsPEM().pemString.write(
                to: directory.appending(path: "\(prefix)-\(suffix).pem"), atomically: true, encoding: .utf8)
        }
        let keyURL = directory.appending(path: "\(prefix)-leaf-key.pem")
        try leafKeyPEM.write(to: keyURL, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyURL.path)
    }
}
