import AsyncHTTPClient
import DurationUnits
import Foundation
import NIOCore
import NIOHTTP1
import Tracing

/// One HTTP exchange with Apple (or the simulator): a request out, status, headers and body
/// back, with a deadline. Every transport failure is retryable.
///
/// Each exchange is a client span named `METHOD ROUTE` (Apple's path with `{...}` for ids)
/// with the HTTP client attributes that say nothing secret: method, route, host, port,
/// status. Never the query, a header (the bearer token) or a body (receipts, signed data).
struct AppleHTTPTransport: Sendable {
    struct Response {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]
    }

    let httpClient: HTTPClient
    let timeout: Duration

    /// The largest body accepted from Apple (transaction history pages are ~100 KB).
    static let maximumBodySize = 16 << 20

    func send(
        method: HTTPMethod, url: String, route: String, headers: [(String, String)] = [], body: [UInt8]? = nil
    ) async throws(AppStoreError) -> Response {
        let span = startSpan("\(method.rawValue) \(route)", ofKind: .client)
        defer { span.end() }
        if span.isRecording {
            let components = URLComponents(string: url)
            span.attributes["http.request.method"] = method.rawValue
            span.attributes["url.template"] = route
            span.attributes["server.address"] = components?.host
            span.attributes["server.port"] = components?.port ?? (components?.scheme == "http" ? 80 : 443)
        }
        do {
            let response = try await exchange(method: method, url: url, headers: headers, body: body)
            span.attributes["http.response.status_code"] = response.status
            if response.status >= 400 {
                span.attributes["error.type"] = String(response.status)
                span.setStatus(SpanStatus(code: .error))
            }
            return response
        } catch {
            span.attributes["error.type"] = error.code.rawValue
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    private func exchange(
        method: HTTPMethod, url: String, headers: [(String, String)], body: [UInt8]?
    ) async throws(AppStoreError) -> Response {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        do {
            let response = try await httpClient.execute(request, timeout: timeout.timeAmount)
            let bytes = try await response.body.collect(upTo: Self.maximumBodySize)
            return Response(status: Int(response.status.code), headers: response.headers, body: Array(bytes.readableBytesView))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            throw AppStoreError(.serverUnavailable, "\(Self.host(url)) did not answer within \(timeout)", retryable: true)
        } catch {
            throw AppStoreError(.serverUnavailable, "\(Self.host(url)) could not be reached: \(error)", retryable: true)
        }
    }

    /// The host of a URL, for messages (never the path, which may carry ids).
    static func host(_ url: String) -> String { URL(string: url)?.host ?? "the server" }
}

extension Duration {
    /// The same span as NIO's `TimeAmount`, which AsyncHTTPClient takes.
    var timeAmount: TimeAmount {
        .nanoseconds(nanoseconds)
    }
}
