import Entitlements
import Foundation
import Hummingbird
import JobQueue
import NIOCore

/// A request's fields, typed (`JSONValue`), from a JSON object, a form, or the query string,
/// with the checks every route makes the same way: one reader for the three forms Cloud
/// Softphone's route takes, unknown fields refused, each error naming its field.
struct RequestInput {
    private(set) var values: [String: JSONValue]

    init(_ values: [String: JSONValue]) { self.values = values }

    /// The body as a JSON object (400 when it is not one).
    static func json(_ request: Request, limit: Int) async throws -> RequestInput {
        RequestInput(try jsonObject(try await Self.body(request, limit: limit)))
    }

    /// Bytes that must hold a JSON object (400 when they do not).
    static func jsonObject(_ body: [UInt8]) throws -> [String: JSONValue] {
        guard !body.isEmpty else { throw APIError.badRequest("the body is empty; send a JSON object") }
        guard let object = (try? JSONValue(parsing: body))?.object else {
            throw APIError.badRequest("the body is not a JSON object")
        }
        return object
    }

    /// The body, refusing more than `limit` bytes with 413: at once when the head declares
    /// more, rather than after waiting for a body that may never come.
    static func body(_ request: Request, limit: Int) async throws -> [UInt8] {
        let tooLarge = APIError(.contentTooLarge, "bodyTooLarge", "the body is larger than \(limit) bytes")
        if let declared = request.headers[.contentLength].flatMap(Int.init), declared > limit { throw tooLarge }
        do {
            return Array(try await request.body.collect(upTo: limit).readableBytesView)
        } catch is NIOTooManyBytesError {
            throw tooLarge
        }
    }

    /// `a=1&b=2` decoded (`+` is a space).
    static func form(_ text: Substring) -> [String: JSONValue] {
        var values: [String: JSONValue] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                String(part).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(part)
            }
            guard let name = parts.first.map(decode), !name.isEmpty else { continue }
            values[name] = .string(parts.count > 1 ? decode(parts[1]) : "")
        }
        return values
    }

    /// A string field; `nil` when absent, 400 when of another type or too long.
    func string(_ name: String, maxLength: Int = 256) throws -> String? {
        guard let value = values[name], value != .null else { return nil }
        guard let text = value.string else { throw APIError.badRequest("\(name) must be a string") }
        guard text.utf8.count <= maxLength else { throw APIError.badRequest("\(name) is longer than \(maxLength) bytes") }
        return text
    }

    func required(_ name: String, maxLength: Int = 256) throws -> String {
        guard let text = try string(name, maxLength: maxLength), !text.isEmpty else { throw APIError.badRequest("\(name) is required") }
        return text
    }

    func object(_ name: String) throws -> RequestInput? {
        guard let value = values[name], value != .null else { return nil }
        guard let object = value.object else { throw APIError.badRequest("\(name) must be an object") }
        return RequestInput(object)
    }

    /// A whole number in `range` (`5` or `5.0`; not `true`, not a string); 400 with `message` otherwise.
    func integer(_ name: String, in range: ClosedRange<Int>, message: String) throws -> Int {
        let whole: Int? =
            switch values[name] {
            case .integer(let value): Int(exactly: value)
            case .number(let value): Int(exactly: value)
            default: nil
            }
        guard let whole, range.contains(whole) else { throw APIError.badRequest(message) }
        return whole
    }

    /// A list of `count` strings; `nil` when absent, 400 with `message` for anything else.
    func strings(_ name: String, count: ClosedRange<Int>, message: String) throws -> [String]? {
        guard let value = values[name] else { return nil }
        guard case .array(let items) = value, count.contains(items.count) else { throw APIError.badRequest(message) }
        return try items.map { item in
            guard let text = item.string else { throw APIError.badRequest(message) }
            return text
        }
    }

    /// Only these fields may appear (typos are errors, not silently ignored).
    func allow(_ names: Set<String>) throws {
        if let unknown = values.keys.sorted().first(where: { !names.contains($0) }) {
            throw APIError.badRequest("unknown field \(unknown)")
        }
    }
}

extension RequestInput {
    /// Checks a customer id against how the publisher names customers.
    /// Refuses a customer id that does not fit how the publisher names customers; returns it
    /// as it is stored (`Publisher.canonicalCustomerId`).
    static func checkCustomer(_ id: String, for publisher: Publisher, field: String = "customer") throws -> String {
        if let problem = publisher.customerIdProblem(id, field: field) { throw APIError.badRequest(problem) }
        return publisher.canonicalCustomerId(id)
    }

    /// A path parameter, percent-decoded.
    static func path(_ context: APIRequestContext, _ name: String) throws -> String {
        guard let raw = context.parameters.get(name), let value = raw.removingPercentEncoding, !value.isEmpty else {
            throw APIError.badRequest("the path has no \(name)")
        }
        return value
    }
}
