import AppStore
import Crypto
import Foundation
import Testing
import X509
import _CryptoExtras

@testable import AppStoreSimulator

/// The chain of a receipt a sender built: its certificates are the sender's choice, so the
/// search for a chain is bounded, and a chain verified once vouches only for the very same
/// certificates.
@Suite struct AppReceiptChainTests {
    static let validity = (from: Date(timeIntervalSince1970: 1_600_000_000), to: Date(timeIntervalSince1970: 2_200_000_000))

    static func content(_ bundleId: String) -> [UInt8] {
        var receipt = AppReceipt()
        receipt.receiptType = "Production"
        receipt.bundleId = bundleId
        receipt.creationDate = AppleTimestamp(Date(timeIntervalSince1970: 1_700_000_000))
        return AppReceiptEncoder.encode(receipt)
    }

    /// A signer that names the issuer and serial number of one verified before, with a key of
    /// its own: its receipt is refused, however recently the genuine one verified.
    @Test func aForgedSignerNamingAVerifiedOnesIssuerAndSerialIsRefused() async throws {
        let authority = try ReceiptSigningAuthority()
        let verifier = AppReceiptVerifier(configuration: .init(roots: [authority.root]))
        let genuine = try await verifier.verify(der: try authority.sign(content: Self.content("com.example.genuine")))
        #expect(genuine.bundleId == "com.example.genuine")

        let forgedKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let forgedLeaf = try Certificate(
            version: .v3, serialNumber: authority.leaf.serialNumber, publicKey: .init(forgedKey.publicKey),
            notValidBefore: authority.leaf.notValidBefore, notValidAfter: authority.leaf.notValidAfter,
            issuer: authority.leaf.issuer, subject: authority.leaf.subject, signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: authority.leaf.extensions, issuerPrivateKey: .init(forgedKey))
        let forger = try ReceiptSigningAuthority(
            root: authority.root, intermediate: authority.intermediate, leaf: forgedLeaf, leafKey: forgedKey)
        let forged = try forger.sign(content: Self.content("com.example.forged"))
        let error = await #expect(throws: AppStoreError.self) { try await verifier.verify(der: forged) }
        #expect(error?.code == .invalidCertificateChain, "\(String(describing: error))")
    }

    /// Certificates of one name and one key, each signed by that key: every one is a parent
    /// of every other, and none leads to a trusted root. Searched, their chains take the
    /// factorial of their number (a minute for eight); they are refused by their number.
    @Test func aReceiptCarryingMoreCertificatesThanAChainNeedsIsRefusedUnsearched() async throws {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("Loop") }
        let loop = try (0..<11).map { index in
            try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey),
                notValidBefore: Self.validity.from, notValidAfter: Self.validity.to, issuer: name, subject: name,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                    SubjectAlternativeNames([.dnsName("i\(index).example")])
                }, issuerPrivateKey: .init(key))
        }
        let leafKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey),
            notValidBefore: Self.validity.from, notValidAfter: Self.validity.to, issuer: name,
            subject: try DistinguishedName { CommonName("Leaf") }, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions(), issuerPrivateKey: .init(key))
        let sender = try ReceiptSigningAuthority(root: loop[0], intermediate: loop[1], leaf: leaf, leafKey: leafKey)
        let verifier = AppReceiptVerifier(configuration: .init(roots: [try ReceiptSigningAuthority().root]))

        // The signer and seven more: more than a chain needs, refused by their number.
        let seven = try sender.sign(content: Self.content("com.example.loop"), carrying: Array(loop[2..<8]))
        let refused = await #expect(throws: AppStoreError.self) { try await verifier.verify(der: seven) }
        #expect(refused?.code == .invalidCertificateChain)
        #expect(refused?.message.contains("carries 8 certificates") == true, "\(String(describing: refused))")

        // More than a container may carry: refused as it is read.
        let twelve = try sender.sign(content: Self.content("com.example.loop"), carrying: Array(loop[2...]))
        let malformed = await #expect(throws: AppStoreError.self) { try await verifier.verify(der: twelve) }
        #expect(malformed?.code == .invalidFormat)
        #expect(malformed?.message.contains("more than 8 certificates") == true, "\(String(describing: malformed))")

        // A few are still searched, and refused for what they are: no path to a trusted root.
        let few = try sender.sign(content: Self.content("com.example.loop"), carrying: [loop[2]])
        let untrusted = await #expect(throws: AppStoreError.self) { try await verifier.verify(der: few) }
        #expect(untrusted?.code == .invalidCertificateChain)
        #expect(untrusted?.message.contains("not trusted") == true, "\(String(describing: untrusted))")
    }
}
