import HTTPTypes
import Hummingbird
import Tracing

/// A server span for each request, named `METHOD ROUTE` (`POST /v1/purchases`), continuing
/// the caller's W3C `traceparent` when it sends one.
///
/// Its attributes are HTTP's semantic conventions less anything that can be secret or
/// personal: method, route template, status, scheme and protocol version. Never the path as
/// sent (it holds customer ids), the query (some callers put keys there), a header (tokens,
/// app keys, Basic credentials) or a body. Hummingbird's own `TracingMiddleware` records the
/// query and the path, so the API uses this one.
struct RequestTracingMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var parent = InstrumentationContext.current ?? .topLevel
        InstrumentationSystem.instrument.extract(request.headers, into: &parent, using: HeaderExtractor())
        let span = startSpan(request.method.rawValue, context: parent, ofKind: .server)
        if span.isRecording {
            span.attributes["http.request.method"] = request.method.rawValue
            span.attributes["url.scheme"] = "http"
            span.attributes["network.protocol.version"] = "1.1"
        }
        func name(status: HTTPResponse.Status) {
            guard span.isRecording else { return }
            if let route = context.endpointPath.map(Self.template) {
                span.operationName = "\(request.method.rawValue) \(route)"
                span.attributes["http.route"] = route
            }
            span.attributes["http.response.status_code"] = Int(status.code)
            if status.code >= 500 {
                span.attributes["error.type"] = String(status.code)
                span.setStatus(SpanStatus(code: .error))
            }
        }
        do {
            var response = try await InstrumentationContext.$current.withValue(span.context) { try await next(request, context) }
            name(status: response.status)
            guard span.isRecording else {
                span.end()
                return response
            }
            // Ends once the body is written: a streamed answer counts whole.
            let body = response.body
            response.body = ResponseBody(contentLength: body.contentLength) { writer in
                defer { span.end() }
                try await body.write(writer)
            }
            return response
        } catch {
            name(status: (error as? any HTTPResponseError)?.status ?? .internalServerError)
            span.end()
            throw error
        }
    }

    /// Hummingbird's `/v1/jobs/:id` as the OpenAPI document spells it: `/v1/jobs/{id}`.
    static func template(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { part in
            part.hasPrefix(":") ? "{\(part.dropFirst())}" : String(part)
        }.joined(separator: "/")
    }
}

/// Reads the W3C trace context headers of a request.
private struct HeaderExtractor: Extractor {
    func extract(key: String, from headers: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { headers[$0] }
    }
}
