import Hummingbird
import Logging

/// Turns an unexpected error (Redis unreachable, a bug) into `500 {"error": "internal"}`
/// and logs it with the route's template, never the request's path or body (they hold
/// customer ids and receipts). Refusals (`HTTPResponseError`) pass through as they are.
struct FaultMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as any HTTPResponseError {
            throw error
        } catch {
            logger.error(
                "request failed", metadata: ["route": "\(context.endpointPath ?? "?")", "method": "\(request.method)", "error": "\(error)"])
            throw APIError(.internalServerError, "internal", "the request could not be completed now; it is safe to send it again")
        }
    }
}
