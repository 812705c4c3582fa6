import Crypto
import Foundation
import SwiftASN1
import X509

/// Verifies a legacy app receipt locally: the PKCS#7 signature over the payload, and the
/// signer's chain to Apple Inc. Root (SHA-1 era certificates included) at the receipt's
/// creation date; then decodes the payload.
///
/// Local verification proves the receipt is Apple's and unaltered. It cannot tell whether a
/// purchase was later refunded; `VerifyReceiptClient` or the App Store Server API can.
public struct AppReceiptVerifier: Sendable {
    public enum ValidationTime: Sendable, Hashable {
        /// At the receipt's creation date (receipt signing certificates expire; receipts do not).
        case receiptCreationDate
        case now
        case fixed(Date)
    }

    public struct Configuration: Sendable {
        /// Apple Inc. Root by default.
        public var roots: [Certificate] = AppleRootCertificates.receiptRoots
        /// The app's bundle id; `nil` accepts any (and reports it).
        public var bundleId: String?
        public var validationTime: ValidationTime = .receiptCreationDate
        /// Accept Xcode receipts signed directly by a trusted root (add Xcode's StoreKit
        /// certificate to `roots`).
        public var allowXcode = false

        public init(bundleId: String? = nil, roots: [Certificate] = AppleRootCertificates.receiptRoots) {
            self.bundleId = bundleId
            self.roots = roots
        }
    }

    public let configuration: Configuration
    private let chainVerifier: CertificateChainVerifier
    private let roots: [Certificate]

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.roots = configuration.roots
        self.chainVerifier = CertificateChainVerifier(roots: configuration.roots)
    }

    /// Verifies a receipt as apps send it: base64 (padding optional, line breaks allowed).
    public func verify(base64 text: String) async throws(AppStoreError) -> AppReceipt {
        guard let bytes = AppleBase64.decode(text), !bytes.isEmpty else {
            throw AppStoreError(.invalidFormat, "the receipt is not base64")
        }
        return try await verify(der: bytes)
    }

    /// Verifies a receipt's raw (BER or DER) bytes.
    public func verify(der bytes: [UInt8]) async throws(AppStoreError) -> AppReceipt {
        let container = try PKCS7SignedData(berEncoded: bytes)
        let receipt = try AppReceiptPayloadParser.parse(container.content)
        try Self.checkSignature(container)

        let time: Date
        switch configuration.validationTime {
        case .receiptCreationDate: time = receipt.creationDate?.date ?? Date()
        case .now: time = Date()
        case .fixed(let fixed): time = fixed
        }
        if roots.contains(container.signer) {
            // A receipt signed by a trusted root itself: only Xcode's StoreKit testing does that.
            guard configuration.allowXcode, receipt.receiptType == "Xcode" else {
                throw AppStoreError(
                    .invalidCertificateChain, "a receipt signed directly by a root is only accepted for Xcode receipts")
            }
            guard time >= container.signer.notValidBefore, time <= container.signer.notValidAfter else {
                throw AppStoreError(.certificateExpired, "the signing certificate is not valid at \(time.formatted(.iso8601))")
            }
        } else {
            let others = container.certificates.indices.filter { container.certificates[$0] != container.signer }
            // Apple's receipts carry the signer, one intermediate and the root. The chain search
            // over certificates the sender chose grows with the factorial of their number (one of
            // 8 that all chain to each other takes a minute): a few are all a chain needs.
            guard others.count <= Self.maximumIntermediates else {
                throw AppStoreError(
                    .invalidCertificateChain,
                    "the receipt carries \(container.certificates.count) certificates; Apple's carry three")
            }
            // The cache is keyed by the exact certificates: a forged signer naming the issuer and
            // serial of one seen before must not find its chain verified.
            var digest = SHA256()
            for der in [container.signerDER] + others.map({ container.certificateDER[$0] }) {
                digest.update(data: der)
                digest.update(data: [0])
            }
            _ = try await chainVerifier.verify(
                leaf: container.signer, intermediates: others.map { container.certificates[$0] }, at: time,
                cacheKey: digest.finalize().map { String(format: "%02x", $0) }.joined())
        }

        if let expected = configuration.bundleId, receipt.bundleId != expected {
            throw AppStoreError(.invalidAppIdentifier, "bundle id \(receipt.bundleId ?? "(none)") is not \(expected)")
        }
        return receipt
    }

    /// The most certificates besides its signer a receipt may carry for its chain.
    static let maximumIntermediates = 3

    static let sha1: ASN1ObjectIdentifier = [1, 3, 14, 3, 2, 26]
    static let sha256: ASN1ObjectIdentifier = [2, 16, 840, 1, 101, 3, 4, 2, 1]

    private static func checkSignature(_ container: PKCS7SignedData) throws(AppStoreError) {
        let rsaEncryption: ASN1ObjectIdentifier = [1, 2, 840, 113549, 1, 1, 1]
        let algorithm: Certificate.SignatureAlgorithm
        switch (container.signatureAlgorithm, container.digestAlgorithm) {
        case (rsaEncryption, sha1), ([1, 2, 840, 113549, 1, 1, 5], sha1): algorithm = .sha1WithRSAEncryption
        case (rsaEncryption, sha256), ([1, 2, 840, 113549, 1, 1, 11], sha256): algorithm = .sha256WithRSAEncryption
        case ([1, 2, 840, 10045, 4, 3, 2], sha256): algorithm = .ecdsaWithSHA256
        default:
            throw AppStoreError(
                .invalidSignature,
                "unsupported receipt signature algorithm \(container.signatureAlgorithm) with digest \(container.digestAlgorithm)")
        }
        var signed = container.content
        if let attributes = container.signedAttributes {
            let digest: [UInt8] =
                container.digestAlgorithm == sha1
                ? Array(Insecure.SHA1.hash(data: container.content)) : Array(SHA256.hash(data: container.content))
            guard container.messageDigest == digest else {
                throw AppStoreError(.invalidSignature, "the receipt's signed digest does not match its content")
            }
            signed = attributes
        }
        guard container.signer.publicKey.isValidSignature(container.signature, for: signed, signatureAlgorithm: algorithm) else {
            throw AppStoreError(.invalidSignature, "the receipt signature does not match its content")
        }
    }
}
