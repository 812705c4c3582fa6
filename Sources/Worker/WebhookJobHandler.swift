import AsyncHTTPClient
import Crypto
import Foundation
import JobQueue
import NIOCore

/// `webhook`: posts one event to the publisher's URL, signed so the publisher can check it
/// came from Entitle and is fresh:
///
///     X-Entitle-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
///
/// 2xx is delivered; 408, 429, 5xx and network errors are retried with backoff; any other
/// answer is permanent (the job goes to the dead set, where an operator can retry it).
public struct WebhookJobHandler: EntitlementJobHandler {
    let service: EntitlementService
    let httpClient: HTTPClient

    public init(service: EntitlementService, httpClient: HTTPClient = .shared) {
        self.service = service
        self.httpClient = httpClient
    }

    /// The signature header for a body, as the receiver recomputes it.
    public static func signature(body: String, secret: String, timestamp: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data("\(timestamp).\(body)".utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return "t=\(timestamp),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    func run(_ job: JobContext) async throws -> [String: String] {
        let payload = try JobPayloads.decode(JobPayloads.Webhook.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        guard let webhook = publisher.webhook, let secret = service.configuration.webhookSecrets[publisher.id] else {
            throw JobRefusal.notPossible(code: "noWebhook", "publisher \(publisher.id) has no webhook configured")
        }
        var request = HTTPClientRequest(url: webhook.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Entitle-Webhooks/1")
        request.headers.add(name: "X-Entitle-Event-Id", value: payload.eventId)
        request.headers.add(
            name: "X-Entitle-Signature",
            value: Self.signature(body: payload.event, secret: secret, timestamp: Int64(Date().timeIntervalSince1970)))
        request.body = .bytes(ByteBuffer(string: payload.event))
        let status: Int
        do {
            let response = try await httpClient.execute(request, timeout: .seconds(15))
            status = Int(response.status.code)
            _ = try await response.body.collect(upTo: 1 << 16)
        } catch {
            throw JobFailure.retryable("webhook.unreachable", "\(webhook.url) could not be reached: \(error)")
        }
        switch status {
        case 200..<300: return ["eventId": payload.eventId, "status": String(status)]
        case 408, 429, 500...: throw JobFailure.retryable("webhook.status\(status)", "\(webhook.url) answered \(status)")
        default: throw JobFailure.permanent("webhook.status\(status)", "\(webhook.url) answered \(status)")
        }
    }
}
