import AsyncHTTPClient
import Crypto
import EntitleCore
import Foundation
import JobQueue
import NIOCore
import Tracing

/// `webhook`: posts one event to the publisher's URL, signed so the publisher can check it
/// came from Entitle and is fresh:
///
///     X-Entitle-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
///
/// During a rotation of the webhook secret (two secrets configured) the header carries one
/// `v1=` per secret. Redirects are never followed, and the URL's host must resolve to public
/// addresses only (see `WebhookDestination`), unless the deployment allows private ones.
/// 2xx is delivered; 408, 429, 5xx and network errors are retried with backoff; any other
/// answer, a redirect or a refused address is permanent (the job goes to the dead set, where
/// an operator can retry it).
package struct WebhookJobHandler: EntitlementJobHandler {
    var asksApple: Bool { false }
    let service: EntitlementService
    let eventLoopGroup: any EventLoopGroup

    package init(service: EntitlementService, eventLoopGroup: any EventLoopGroup = HTTPClient.defaultEventLoopGroup) {
        self.service = service
        self.eventLoopGroup = eventLoopGroup
    }

    /// The signature header for a body, as the receiver recomputes it: one `v1=` per secret.
    package static func signature(body: String, secrets: [Secret], timestamp: Int64) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var header = "t=\(timestamp)"
        for secret in secrets {
            let mac = HMAC<SHA256>.authenticationCode(
                for: Data("\(timestamp).\(body)".utf8), using: SymmetricKey(data: Data(secret.value.utf8)))
            var digits: [UInt8] = []
            for byte in mac {
                digits.append(hex[Int(byte >> 4)])
                digits.append(hex[Int(byte & 0x0F)])
            }
            header += ",v1=" + String(decoding: digits, as: UTF8.self)
        }
        return header
    }

    func run(_ job: JobContext) async throws -> [String: String] {
        let payload = try JobPayloads.decode(JobPayloads.Webhook.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        guard let webhook = publisher.webhook, let secrets = service.configuration.webhookSecrets.current[publisher.id], !secrets.isEmpty
        else {
            throw JobRefusal.notPossible(code: "noWebhook", "publisher \(publisher.id) has no webhook configured")
        }
        let destination: WebhookDestination
        do {
            destination = try await WebhookDestination.resolve(
                webhook.url, allowPrivate: service.configuration.webhooksMayReachPrivateAddresses)
        } catch {
            throw JobFailure.permanent("webhook.forbiddenAddress", error.description)
        }
        // A client span per delivery: method, host, port and status. Never the URL's path or
        // query (a publisher may put a key there), a header (the signature) or the body.
        let span = startSpan("POST webhook", ofKind: .client)
        defer { span.end() }
        var request = HTTPClientRequest(url: webhook.url)
        request.method = .POST
        if span.isRecording {
            let components = URLComponents(string: webhook.url)
            span.attributes["http.request.method"] = "POST"
            span.attributes["server.address"] = components?.host
            span.attributes["server.port"] = components?.port ?? (components?.scheme == "http" ? 80 : 443)
            // Not the event id: it holds the customer's id.
            span.attributes["entitle.publisher"] = publisher.id
            // The publisher's backend may continue the trace (W3C trace context).
            InstrumentationSystem.instrument.inject(span.context, into: &request, using: HeadersInjector())
        }
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "Entitle-Webhooks/1")
        request.headers.add(name: "X-Entitle-Event-Id", value: payload.eventId)
        request.headers.add(
            name: "X-Entitle-Signature",
            value: Self.signature(body: payload.event, secrets: secrets, timestamp: Int64(Date().timeIntervalSince1970)))
        request.body = .bytes(ByteBuffer(string: payload.event))
        // A client of its own per delivery: it connects to the address just checked (not to
        // whatever the name resolves to next) and follows no redirect.
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(10), read: .seconds(15)))
        if WebhookDestination.literal(destination.host) == nil { configuration.dnsOverride = [destination.host: destination.address] }
        // AsyncHTTPClient's own request spans would record the whole URL, query and all.
        configuration.tracing.tracer = nil
        let client = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration)
        let status: Int
        do {
            let response = try await client.execute(request, timeout: .seconds(15))
            status = Int(response.status.code)
            _ = try await response.body.collect(upTo: 1 << 16)
        } catch {
            await Self.shutDown(client, job: job)
            span.attributes["error.type"] = "webhook.unreachable"
            span.setStatus(SpanStatus(code: .error))
            throw JobFailure.retryable("webhook.unreachable", "\(webhook.url) could not be reached: \(error)")
        }
        await Self.shutDown(client, job: job)
        span.attributes["http.response.status_code"] = status
        if !(200..<300).contains(status) {
            span.attributes["error.type"] = String(status)
            span.setStatus(SpanStatus(code: .error))
        }
        switch status {
        case 200..<300: return ["eventId": payload.eventId, "status": String(status)]
        case 300..<400:
            throw JobFailure.permanent("webhook.status\(status)", "\(webhook.url) answered \(status); webhooks do not follow redirects")
        case 408, 429, 500...: throw JobFailure.retryable("webhook.status\(status)", "\(webhook.url) answered \(status)")
        default: throw JobFailure.permanent("webhook.status\(status)", "\(webhook.url) answered \(status)")
        }
    }

    private static func shutDown(_ client: HTTPClient, job: JobContext) async {
        do {
            try await client.shutdown()
        } catch {
            job.logger.warning("webhook client did not shut down cleanly", metadata: ["error": "\(error)"])
        }
    }
}

/// Writes W3C trace context headers into a request.
private struct HeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into request: inout HTTPClientRequest) {
        request.headers.replaceOrAdd(name: key, value: value)
    }
}
