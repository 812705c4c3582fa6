import EntitleCore
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    /// The largest import posted in one request (a file of a few hundred thousand lines of
    /// original transaction ids; larger ones: several requests, or `entitle import`).
    static let importBodyLimit = 32 << 20

    func registerImports(on routes: RouteTable) {
        // A publisher arriving with the customers it already has: each line (CSV or JSON
        // lines) a `receipt` job marked imported, its events posted only with ?webhooks=true.
        routes.add(.post, "/v1/imports") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let body = try await RequestInput.body(request, limit: Self.importBodyLimit)
            guard !body.isEmpty else { throw APIError.badRequest("the body is empty; send CSV (customer,proof) or JSON lines") }
            guard let text = String(validating: body, as: UTF8.self) else { throw APIError.badRequest("the body is not UTF-8 text") }
            let webhooks: Bool
            switch request.uri.queryParameters.get("webhooks") {
            case nil, "false": webhooks = false
            case "true": webhooks = true
            default: throw APIError.badRequest("webhooks must be true or false")
            }
            let summary = try await Imports(jobQueue: jobQueue).start(
                text: text, publisher: publisher, webhooks: webhooks, queue: configuration.queue)
            guard summary.queued > 0 else {
                let lines = summary.refused.prefix(5).map { "line \($0.line): \($0.message)" }.joined(separator: "; ")
                throw APIError.badRequest(summary.refused.isEmpty ? "the body holds no line" : "no line could be imported (\(lines))")
            }
            return try JSONBody.response(encoding: summary, status: .accepted)
        }
        routes.add(.get, "/v1/imports/{id}") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let id = try RequestInput.path(context, "id")
            guard id.count <= 64, id.allSatisfy({ $0.isHexDigit }),
                let progress = try await Imports(jobQueue: jobQueue).progress(publisher: publisher.id, id: id)
            else { throw APIError.notFound("\(publisher.id) has no import \(id)") }
            return try JSONBody.response(encoding: progress)
        }
    }
}
