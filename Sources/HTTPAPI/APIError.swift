import Foundation
import HTTPTypes
import Hummingbird

/// A request the API refuses, with a stable `code` for programs and a `message` for people.
/// Rendered as `{"error": code, "message": message}`.
package struct APIError: Error, Sendable, HTTPResponseError {
    package let status: HTTPResponse.Status
    package let code: String
    package let message: String
    /// Extra headers (`Retry-After`, `WWW-Authenticate`).
    package var headers: HTTPFields = [:]

    package init(_ status: HTTPResponse.Status, _ code: String, _ message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = try JSONBody.response(encoding: ["error": code, "message": message], status: status)
        response.headers.append(contentsOf: headers)
        return response
    }

    static func badRequest(_ message: String) -> APIError { APIError(.badRequest, "invalidRequest", message) }
    static func unprocessable(_ code: String, _ message: String) -> APIError { APIError(.unprocessableContent, code, message) }
    static func notFound(_ message: String) -> APIError { APIError(.notFound, "notFound", message) }
    static func unauthorized(_ message: String, scheme: String = "Bearer") -> APIError {
        var error = APIError(.unauthorized, "unauthorized", message)
        error.headers[.wwwAuthenticate] = "\(scheme) realm=\"entitle\""
        return error
    }
}

/// JSON responses (keys sorted, slashes unescaped).
enum JSONBody {
    /// `{"jobId": ID}`, written directly: the hot path of every enqueue (job ids are
    /// letters, digits and `-_.:`, nothing to escape).
    static func jobId(_ id: String, status: HTTPResponse.Status) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: "{\"jobId\":\"\(id)\"}")))
    }

    /// A document, keys sorted, slashes unescaped.
    static func response(
        encoding value: some Encodable, status: HTTPResponse.Status = .ok, dates: JSONEncoder.DateEncodingStrategy = .deferredToDate
    ) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = dates
        return Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}
