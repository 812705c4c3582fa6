import AppStore
import AppStoreSimulator
import Crypto
import Foundation
import Testing
import X509

/// Every way a forged or damaged JWS must be refused, with PKI minted in the test.
@Suite struct SignedDataRejectionTests {
    static let payload = Array(
        #"{"transactionId":"1","originalTransactionId":"1","bundleId":"com.example","productId":"pro","environment":"Sandbox","signedDate":1698148900000}"#
            .utf8)

    let authority: SigningAuthority
    let verifier: SignedDataVerifier

    init() throws {
        authority = try SigningAuthority()
        verifier = SignedDataVerifier(configuration: .init(bundleId: "com.example", roots: [authority.root]))
    }

    func code(of jws: String, with verifier: SignedDataVerifier? = nil) async -> AppStoreError.Code? {
        do {
            _ = try await (verifier ?? self.verifier).verifyTransaction(jws)
            return nil
        } catch {
            return error.code
        }
    }

    @Test func theGoodCaseVerifies() async throws {
        let transaction = try await verifier.verifyTransaction(try authority.sign(payload: Self.payload))
        #expect(transaction.productId == "pro")
    }

    @Test func anotherRootIsNotTrusted() async throws {
        let stranger = try SigningAuthority()
        #expect(await code(of: try stranger.sign(payload: Self.payload)) == .invalidCertificateChain)
        // Apple's real root does not trust a minted chain either.
        #expect(
            await code(of: try authority.sign(payload: Self.payload), with: SignedDataVerifier(configuration: .init()))
                == .invalidCertificateChain)
    }

    @Test func missingMarkersAreRefused() async throws {
        var noLeafMarker = SigningAuthority.Options()
        noLeafMarker.leafMarker = false
        let withoutLeaf = try SigningAuthority(options: noLeafMarker)
        let verifierA = SignedDataVerifier(configuration: .init(roots: [withoutLeaf.root]))
        #expect(await code(of: try withoutLeaf.sign(payload: Self.payload), with: verifierA) == .invalidCertificateChain)

        var noIntermediateMarker = SigningAuthority.Options()
        noIntermediateMarker.intermediateMarker = false
        let withoutIntermediate = try SigningAuthority(options: noIntermediateMarker)
        let verifierB = SignedDataVerifier(configuration: .init(roots: [withoutIntermediate.root]))
        #expect(await code(of: try withoutIntermediate.sign(payload: Self.payload), with: verifierB) == .invalidCertificateChain)
    }

    @Test func expiredAndNotYetValidChainsAreRefused() async throws {
        var options = SigningAuthority.Options()
        options.notValidBefore = Vectors.date(1_500_000_000)
        options.notValidAfter = Vectors.date(1_600_000_000)  // 2020, before the payload's 2023 signedDate
        let old = try SigningAuthority(options: options)
        let verifier = SignedDataVerifier(configuration: .init(roots: [old.root]))
        #expect(await code(of: try old.sign(payload: Self.payload), with: verifier) == .certificateExpired)

        var fixed = SignedDataVerifier.Configuration(roots: [authority.root])
        fixed.validationTime = .fixed(Vectors.date(1_000_000_000))
        #expect(
            await code(of: try authority.sign(payload: Self.payload), with: SignedDataVerifier(configuration: fixed))
                == .certificateExpired)
    }

    @Test func aCachedChainIsStillCheckedAgainstEachTime() async throws {
        let jws = try authority.sign(payload: Self.payload)
        _ = try await verifier.verifyTransaction(jws)
        // The same chain, now signing a payload dated after the certificates expired.
        let late = try authority.sign(
            payload: Array(#"{"bundleId":"com.example","environment":"Sandbox","signedDate":4102444800000}"#.utf8))
        #expect(await code(of: late) == .certificateExpired)
        _ = try await verifier.verifyTransaction(jws)
    }

    @Test func tamperedPayloadOrHeaderBreaksTheSignature() async throws {
        let jws = try authority.sign(payload: Self.payload)
        let parts = jws.split(separator: ".").map(String.init)
        let forgedPayload = Array(String(decoding: Self.payload, as: UTF8.self).replacingOccurrences(of: "pro", with: "max").utf8)
        let tamperedPayload = [parts[0], base64URL(forgedPayload), parts[2]].joined(separator: ".")
        #expect(await code(of: tamperedPayload) == .invalidSignature)

        // A header re-encoded with an extra member: the same chain, but not the signed bytes.
        let header = try #require(Data(base64Encoded: padded(parts[0])))
        var object = try #require(try JSONSerialization.jsonObject(with: header) as? [String: Any])
        object["kid"] = "forged"
        let tamperedHeader = [base64URL(Array(try JSONSerialization.data(withJSONObject: object))), parts[1], parts[2]]
            .joined(separator: ".")
        #expect(await code(of: tamperedHeader) == .invalidSignature)

        let truncatedSignature = [parts[0], parts[1], String(parts[2].dropLast(4))].joined(separator: ".")
        #expect(await code(of: truncatedSignature) == .invalidSignature)
    }

    /// The verifier keeps headers it has seen by their bytes (`JWSHeaderCache`): a header
    /// seen before spares the parsing, never a check.
    @Test func aHeaderSeenBeforeSparesNoCheck() async throws {
        let jws = try authority.sign(payload: Self.payload)
        _ = try await verifier.verifyTransaction(jws)
        _ = try await verifier.verifyTransaction(jws)
        let parts = jws.split(separator: ".").map(String.init)
        // The same header bytes over another payload: the signature is still checked.
        let forged = Array(String(decoding: Self.payload, as: UTF8.self).replacingOccurrences(of: "pro", with: "max").utf8)
        #expect(await code(of: [parts[0], base64URL(forged), parts[2]].joined(separator: ".")) == .invalidSignature)
        // Another app's payload under the same header and a valid signature: still refused for its app.
        let otherApp = try authority.sign(
            payload: Array(#"{"bundleId":"com.other","environment":"Sandbox","signedDate":1698148900000}"#.utf8))
        #expect(await code(of: otherApp) == .invalidAppIdentifier)
        // A refused algorithm is never kept: the same bytes are refused again.
        let none = try authority.sign(payload: Self.payload, algorithm: "none")
        #expect(await code(of: none) == .unsupportedAlgorithm)
        #expect(await code(of: none) == .unsupportedAlgorithm)
        // A chain the verifier does not trust, signing with a header never seen: refused, and
        // refused again once its header has been seen.
        let stranger = try SigningAuthority().sign(payload: Self.payload)
        #expect(await code(of: stranger) == .invalidCertificateChain)
        #expect(await code(of: stranger) == .invalidCertificateChain)
        // The good one still verifies after all that.
        #expect(try await verifier.verifyTransaction(jws).productId == "pro")
    }

    @Test func onlyES256IsAccepted() async throws {
        for algorithm in ["none", "HS256", "RS256", "ES384", "es256"] {
            let jws = try authority.sign(payload: Self.payload, algorithm: algorithm)
            #expect(await code(of: jws) == .unsupportedAlgorithm, "\(algorithm)")
        }
        // The classic forgery: alg none and an empty signature.
        let jws = try authority.sign(payload: Self.payload)
        let parts = jws.split(separator: ".").map(String.init)
        let none = base64URL(Array(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + "."
        #expect(await code(of: none) == .unsupportedAlgorithm)
    }

    @Test func chainsOfOtherLengthsAreRefused() async throws {
        #expect(
            await code(of: try authority.sign(payload: Self.payload, chain: [authority.leaf, authority.intermediate]))
                == .invalidCertificateChain)
        #expect(await code(of: try authority.sign(payload: Self.payload, chain: [authority.leaf])) == .invalidCertificateChain)
        // The leaf's real issuer left out: the chain cannot be built.
        #expect(
            await code(of: try authority.sign(payload: Self.payload, chain: [authority.leaf, authority.root, authority.root]))
                == .invalidCertificateChain)
    }

    @Test func wrongBundleAndWrongEnvironmentAreRefused() async throws {
        let jws = try authority.sign(payload: Self.payload)
        let otherApp = SignedDataVerifier(configuration: .init(bundleId: "com.example.other", roots: [authority.root]))
        #expect(await code(of: jws, with: otherApp) == .invalidAppIdentifier)
        let productionOnly = SignedDataVerifier(configuration: .init(environment: .production, roots: [authority.root]))
        #expect(await code(of: jws, with: productionOnly) == .invalidEnvironment)
    }

    /// Authentic data that leaves its app out is no app's: a verifier for an app refuses a
    /// transaction, an app transaction or a notification naming none (else one with the
    /// field removed would pass for every app of every publisher). A renewal info never names
    /// its app; it still verifies.
    @Test func dataThatNamesNoAppIsRefusedByAnAppsVerifier() async throws {
        func sign(_ json: String) throws -> String { try authority.sign(payload: Array(json.utf8)) }
        let signed = 1_698_148_900_000
        let transaction = try sign(
            #"{"transactionId":"1","originalTransactionId":"1","productId":"pro","environment":"Sandbox","signedDate":\#(signed)}"#)
        #expect(await code(of: transaction) == .invalidAppIdentifier)
        let appTransaction = try sign(#"{"receiptType":"Sandbox","applicationVersion":"1","signedDate":\#(signed)}"#)
        await #expect(throws: AppStoreError.self) { _ = try await verifier.verifyAppTransaction(appTransaction) }
        let notification = try sign(
            #"{"notificationType":"TEST","notificationUUID":"u-1","data":{"environment":"Sandbox"},"signedDate":\#(signed)}"#)
        do {
            _ = try await verifier.verifyNotification(notification)
            Issue.record("a notification naming no app was accepted")
        } catch {
            #expect(error.code == .invalidAppIdentifier)
        }
        // The same notification naming the app verifies: the refusal is about the missing field.
        let named = try sign(
            #"{"notificationType":"TEST","notificationUUID":"u-1","data":{"environment":"Sandbox","bundleId":"com.example"},"signedDate":\#(signed)}"#
        )
        #expect(try await verifier.verifyNotification(named).notificationType == .test)
        let renewal = try sign(
            #"{"originalTransactionId":"1","autoRenewProductId":"pro","autoRenewStatus":1,"environment":"Sandbox","signedDate":\#(signed)}"#
        )
        #expect(try await verifier.verifyRenewalInfo(renewal).autoRenewProductId == "pro")
        // A verifier for no app in particular (the CLI's `entitle verify`) still reads it.
        let anyApp = SignedDataVerifier(configuration: .init(roots: [authority.root]))
        #expect(try await anyApp.verifyTransaction(transaction).productId == "pro")
    }

    @Test func appleLibraryCertificateVectors() async throws {
        let root = try Vectors.certificate("appstore-library/swift/certs/testCA.der")
        let intermediate = try Vectors.certificate("appstore-library/swift/certs/from-SignedDataVerifierTests/test-intermediate-ca.der")
        let leaf = try Vectors.certificate("appstore-library/swift/certs/from-SignedDataVerifierTests/test-leaf.der")
        let effective = Vectors.date(1_761_962_975)
        let chains = CertificateChainVerifier(roots: [root])
        let verified = try await chains.verify(leaf: leaf, intermediates: [intermediate], at: effective, cacheKey: nil)
        #expect(verified.leaf == leaf)

        let badIntermediate = try Vectors.certificate(
            "appstore-library/swift/certs/from-SignedDataVerifierTests/test-intermediate-ca-invalid-oid.der")
        let leafOfBad = try Vectors.certificate(
            "appstore-library/swift/certs/from-SignedDataVerifierTests/test-leaf-for-intermediate-invalid-oid.der")
        await #expect(throws: AppStoreError.self) {
            try await chains.verify(leaf: leafOfBad, intermediates: [badIntermediate], at: effective, cacheKey: nil)
        }
        let badLeaf = try Vectors.certificate("appstore-library/swift/certs/from-SignedDataVerifierTests/test-leaf-invalid-oid.der")
        await #expect(throws: AppStoreError.self) {
            try await chains.verify(leaf: badLeaf, intermediates: [intermediate], at: effective, cacheKey: nil)
        }
        let expired = await #expect(throws: AppStoreError.self) {
            try await chains.verify(leaf: leaf, intermediates: [intermediate], at: Vectors.date(2_280_946_846), cacheKey: nil)
        }
        #expect(expired?.code == .certificateExpired)
        let realRoot = CertificateChainVerifier(roots: AppleRootCertificates.signedDataRoots)
        await #expect(throws: AppStoreError.self) {
            try await realRoot.verify(leaf: leaf, intermediates: [intermediate], at: effective, cacheKey: nil)
        }
    }

    @Test func realAppleChainVerifies() async throws {
        let chains = CertificateChainVerifier(roots: AppleRootCertificates.signedDataRoots)
        let leaf = try Vectors.certificate("certs/Apple-Prod-ECC-MAS-iTunes-Receipt-Signing-leaf-2025.cer")
        let verified = try await chains.verify(
            leaf: leaf, intermediates: [try Vectors.certificate("certs/AppleWWDRCAG6.cer")], at: Vectors.date(1_761_962_975),
            cacheKey: nil)
        // The window is the leaf's: 2025-09-19 to 2027-10-13.
        #expect(verified.validFrom == leaf.notValidBefore)
        #expect(verified.validUntil == leaf.notValidAfter)
    }

    @Test func shippedRootsAreApplesOwn() throws {
        #expect(AppleRootCertificates.rootCAG3DER == (try Vectors.bytes("certs/AppleRootCA-G3.cer")))
        #expect(AppleRootCertificates.appleIncRootDER == (try Vectors.bytes("certs/AppleIncRootCertificate.cer")))
        #expect(
            SHA256.hash(data: AppleRootCertificates.rootCAG3DER).map { String(format: "%02X", $0) }.joined()
                == "63343ABFB89A6A03EBB57E9B3F5FA7BE7C4F5C756F3017B3A8C488C3653E9179")
    }

    @Test func unreachableOCSPResponderIsARetryableFailure() async throws {
        var options = SigningAuthority.Options()
        options.ocspResponder = "http://127.0.0.1:9/ocsp"  // discard port: nothing listens
        let online = try SigningAuthority(options: options)
        var configuration = SignedDataVerifier.Configuration(roots: [online.root])
        configuration.revocationChecker = RevocationChecker(timeout: .seconds(5))
        let verifier = SignedDataVerifier(configuration: configuration)
        let error = await #expect(throws: AppStoreError.self) {
            try await verifier.verifyTransaction(try online.sign(payload: Self.payload))
        }
        #expect(error?.code == .revocationCheckFailed)
        #expect(error?.isRetryable == true)
    }

    func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    func padded(_ text: String) -> String {
        var text = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }
}
