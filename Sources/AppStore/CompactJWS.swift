import Crypto
import Foundation
import X509

/// A JWS in compact form (`header.payload.signature`), split and decoded but not yet trusted.
struct CompactJWS {
    struct Header: Decodable, Sendable {
        var alg: String?
        var x5c: [String]?
        var kid: String?
    }

    let header: Header
    /// The base64 DER certificates of `x5c`, leaf first.
    let certificateChain: [String]
    /// The header's base64url text, as bytes; with `headers`, the chain it verified to when seen before.
    let headerBytes: [UInt8]
    let cachedChain: CertificateChainVerifier.VerifiedChain?
    let payload: [UInt8]
    private let signingInput: [UInt8]
    private let signature: [UInt8]

    /// - Parameter headers: headers seen before; a header with the same bytes is not decoded again.
    init(_ text: String, headers: JWSHeaderCache? = nil) throws(AppStoreError) {
        // Byte-level work throughout: a JWS is ASCII, and Character-level String APIs cost more
        // than the signature check itself.
        let utf8 = Array(text.utf8)
        var start = 0
        var end = utf8.count
        while start < end, Self.isSpace(utf8[start]) { start += 1 }
        while end > start, Self.isSpace(utf8[end - 1]) { end -= 1 }
        let dot = UInt8(ascii: ".")
        guard let first = utf8[start..<end].firstIndex(of: dot),
            let second = utf8[(first + 1)..<end].firstIndex(of: dot),
            utf8[(second + 1)..<end].firstIndex(of: dot) == nil, first > start, second > first + 1
        else {
            throw AppStoreError(.invalidFormat, "not a JWS in compact form (three base64url parts)")
        }
        let seen = headers.flatMap { cache in utf8[start..<first].withUnsafeBufferPointer { cache.entry(for: $0) } }
        let header: Header
        if let seen {
            header = seen.header
        } else {
            guard let headerBytes = Self.decode(utf8[start..<first]),
                let parsed = try? JSONDecoder().decode(Header.self, from: Data(headerBytes))
            else {
                throw AppStoreError(.invalidFormat, "the JWS header is not base64url JSON")
            }
            header = parsed
        }
        guard header.alg == "ES256" else {
            throw AppStoreError(
                .unsupportedAlgorithm, "JWS algorithm \(header.alg.map { "\"\($0)\"" } ?? "(none)") refused; only ES256 is accepted")
        }
        guard let chain = header.x5c, !chain.isEmpty else {
            throw AppStoreError(.invalidFormat, "the JWS header has no x5c certificate chain")
        }
        guard let payload = Self.decode(utf8[(first + 1)..<second]) else {
            throw AppStoreError(.invalidFormat, "the JWS payload is not base64url")
        }
        guard let signature = Self.decode(utf8[(second + 1)..<end]), signature.count == 64 else {
            throw AppStoreError(.invalidSignature, "the JWS signature is not a 64-byte ES256 signature")
        }
        self.header = header
        self.certificateChain = chain
        self.headerBytes = Array(utf8[start..<first])
        self.cachedChain = seen?.chain
        self.payload = payload
        self.signature = signature
        self.signingInput = Array(utf8[start..<second])
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

    private static func decode(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        bytes.withUnsafeBufferPointer { AppleBase64.decode(bytes: $0) }
    }

    func decodePayload<T: Decodable>() throws(AppStoreError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(payload))
        } catch {
            throw AppStoreError(.invalidFormat, "the JWS payload is not a \(T.self): \(Self.describe(error))")
        }
    }

    func parseCertificates() throws(AppStoreError) -> [Certificate] {
        var certificates: [Certificate] = []
        for (index, encoded) in certificateChain.enumerated() {
            guard let der = AppleBase64.decode(encoded), let certificate = try? Certificate(derEncoded: der) else {
                throw AppStoreError(.invalidFormat, "x5c[\(index)] is not a DER certificate")
            }
            certificates.append(certificate)
        }
        return certificates
    }

    func isValidSignature(with key: P256.Signing.PublicKey) -> Bool {
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
        return key.isValidSignature(signature, for: signingInput)
    }

    /// For early (2022) notifications without a top-level `signedDate`: the earliest
    /// `signedDate` of the nested signed data, used only to pick the chain validation time.
    func fallbackSignedDate() -> AppleTimestamp? {
        struct Nested: Decodable {
            struct Data: Decodable {
                var signedTransactionInfo: String?
                var signedRenewalInfo: String?
            }
            var data: Data?
        }
        struct Dated: Decodable { var signedDate: AppleTimestamp? }
        guard let nested = try? JSONDecoder().decode(Nested.self, from: Data(payload)) else { return nil }
        let dates = [nested.data?.signedTransactionInfo, nested.data?.signedRenewalInfo].compactMap { jws -> AppleTimestamp? in
            guard let jws, let inner = try? CompactJWS(jws), let dated: Dated = try? inner.decodePayload() else {
                return nil
            }
            return dated.signedDate
        }
        return dates.min()
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
            DecodingError.keyNotFound(_, let context), DecodingError.dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        default:
            return "\(error)"
        }
    }
}
