import Foundation
import HTTPTypes
import Hummingbird

/// Answers every request on every path: reads what APNs looks at, lets `LocalAPNs` decide, and
/// writes Apple's answer (`apns-id`, and `{"reason": …}` unless 200).
struct APNsResponder: HTTPResponder {
    let state: LocalAPNs

    private static let apnsIdField = HTTPField.Name("apns-id")
    private static let apnsUniqueIdField = HTTPField.Name("apns-unique-id")

    func respond(to request: Request, context: APNsRequestContext) async throws -> Response {
        var push = PushRequest(method: request.method.rawValue, path: request.head.path ?? "")
        for field in request.headers {
            push.set(field: field.name.canonicalName, value: field.value)
        }
        push.connection = context.connection
        // Keep what a payload may be; past that only count, so a huge body costs no memory.
        var body: [UInt8] = []
        for try await chunk in request.body {
            push.bodySize += chunk.readableBytes
            if push.bodySize <= PushRequest.largestPayload { body.append(contentsOf: chunk.readableBytesView) }
        }
        if push.bodySize <= PushRequest.largestPayload {
            push.body = body
            // Parsed here rather than in the actor, which every request passes through.
            push.bodyIsJSONObject = !body.isEmpty && (try? JSONSerialization.jsonObject(with: Data(body))) is [String: Any]
        } else {
            push.body = nil
        }
        return Self.response(await state.answer(push))
    }

    static func response(_ answer: PushAnswer) -> Response {
        var headers = HTTPFields()
        if let name = apnsIdField { headers[name] = answer.apnsId }
        if let uniqueId = answer.uniqueId, let name = apnsUniqueIdField { headers[name] = uniqueId }
        guard let reason = answer.reason else { return Response(status: .ok, headers: headers) }
        headers[.contentType] = "application/json"
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = (try? encoder.encode(ErrorBody(reason: reason, timestamp: answer.timestamp))) ?? Data()
        return Response(
            status: HTTPResponse.Status(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    /// Apple's error body: `reason`, and `timestamp` (milliseconds) with 410 only.
    private struct ErrorBody: Encodable {
        var reason: String
        var timestamp: Int64?
    }
}
