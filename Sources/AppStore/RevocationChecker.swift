import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization
import X509

/// Asks the OCSP responders named in a chain's certificates whether any of them is revoked.
///
/// Off by default. A responder that cannot be reached or answers garbage fails the check as
/// retryable (`revocationCheckFailed`); a revoked certificate fails it for good.
public struct RevocationChecker: Sendable {
    let httpClient: HTTPClient
    let timeout: TimeAmount
    /// How long a good answer is trusted before the chain is checked again.
    public let answerLifetime: TimeInterval

    public init(httpClient: HTTPClient = .shared, timeout: Duration = .seconds(10), answerLifetime: TimeInterval = 900) {
        self.httpClient = httpClient
        self.timeout = timeout.timeAmount
        self.answerLifetime = answerLifetime
    }

    func check(chain: [Certificate], roots: CertificateStore) async throws(AppStoreError) {
        let requester = Requester(httpClient: httpClient, timeout: timeout)
        var verifier = Verifier(rootCertificates: roots) {
            OCSPVerifierPolicy(failureMode: .hard, requester: requester)
        }
        let leaf = chain[0]
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore(chain.dropFirst()))
        if case .couldNotValidate(let failures) = result {
            let reason = failures.first.map { "\($0.policyFailureReason)" } ?? "unknown"
            if requester.sawTransportFailure {
                throw AppStoreError(.revocationCheckFailed, "OCSP responder unavailable: \(reason)", retryable: true)
            }
            if reason.localizedCaseInsensitiveContains("revoked") {
                throw AppStoreError(.certificateRevoked, "a certificate of the chain is revoked: \(reason)")
            }
            throw AppStoreError(.revocationCheckFailed, "OCSP check failed: \(reason)", retryable: true)
        }
    }

    /// Posts OCSP requests over HTTP and remembers whether any could not be delivered.
    final class Requester: OCSPRequester {
        let httpClient: HTTPClient
        let timeout: TimeAmount
        private let failed = Atomic<Bool>(false)

        init(httpClient: HTTPClient, timeout: TimeAmount) {
            self.httpClient = httpClient
            self.timeout = timeout
        }

        var sawTransportFailure: Bool { failed.load(ordering: .relaxed) }

        func query(request: [UInt8], uri: String) async -> OCSPRequesterQueryResult {
            var httpRequest = HTTPClientRequest(url: uri)
            httpRequest.method = .POST
            httpRequest.headers.add(name: "Content-Type", value: "application/ocsp-request")
            httpRequest.body = .bytes(ByteBuffer(bytes: request))
            do {
                let response = try await httpClient.execute(httpRequest, timeout: timeout)
                guard response.status == .ok else {
                    failed.store(true, ordering: .relaxed)
                    return .terminalError(AppStoreError(.revocationCheckFailed, "OCSP responder answered \(response.status.code)"))
                }
                let body = try await response.body.collect(upTo: 1 << 20)
                return .response(Array(body.readableBytesView))
            } catch {
                failed.store(true, ordering: .relaxed)
                return .terminalError(error)
            }
        }
    }
}
