import Foundation
import Testing

/// `docs/openapi.json`, and a checker for the parts of JSON Schema it uses: `type` (one or
/// several, `null` among them), `required`, `properties`, `additionalProperties`, `items`,
/// `enum`, `pattern`, `minimum`/`maximum` and `$ref`.
struct OpenAPIDocument: Sendable {
    static let shared: OpenAPIDocument = {
        let url = APIStack.root.appending(path: "docs/openapi.json")
        // A broken document fails every test that reads through `call`, loudly.
        let data = (try? Data(contentsOf: url)) ?? Data()
        return OpenAPIDocument(
            json: (try? JSONSerialization.jsonObject(with: data) as? [String: Any]).map(SendableJSON.init) ?? SendableJSON([:]))
    }()

    let json: SendableJSON

    var paths: [String: Any] { json.value["paths"] as? [String: Any] ?? [:] }

    /// Every `METHOD /path` the document describes.
    var routes: Set<String> {
        var routes: Set<String> = []
        for (path, item) in paths {
            for method in (item as? [String: Any] ?? [:]).keys { routes.insert("\(method.uppercased()) \(path)") }
        }
        return routes
    }

    func operation(_ route: String) -> [String: Any]? {
        let parts = route.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        return (paths[String(parts[1])] as? [String: Any])?[parts[0].lowercased()] as? [String: Any]
    }

    /// The answer's status is documented for the route, and a JSON body fits its schema.
    func check(_ reply: APIStack.Reply, route: String) throws {
        let found = self.operation(route)
        let operation = try #require(found, "\(route) is not in docs/openapi.json")
        let responses = operation["responses"] as? [String: Any] ?? [:]
        let response = try #require(
            responses[String(reply.status)] as? [String: Any], "\(route) answered \(reply.status), which docs/openapi.json does not list")
        let type = (reply.headers["content-type"] ?? "").split(separator: ";").first.map(String.init) ?? ""
        let content = response["content"] as? [String: Any] ?? [:]
        guard !content.isEmpty else { return }
        let media = try #require(
            content[type] as? [String: Any], "\(route) \(reply.status) answered \(type), not in \(content.keys.sorted())")
        guard type == "application/json", let schema = media["schema"] else { return }
        let body = try JSONSerialization.jsonObject(with: Data(reply.text.utf8), options: [.fragmentsAllowed])
        let problems = validate(body, schema, at: "$")
        #expect(problems.isEmpty, "\(route) \(reply.status): \(problems)")
    }

    /// Problems with a webhook body against the schema `webhooks` gives its `event` (empty when it fits).
    func checkWebhook(_ body: [String: Any]) -> [String] {
        guard let event = body["event"] as? String else { return ["the body names no event"] }
        let operation = ((json.value["webhooks"] as? [String: Any])?[event] as? [String: Any])?["post"] as? [String: Any]
        let content = (operation?["requestBody"] as? [String: Any])?["content"] as? [String: Any]
        guard let schema = (content?["application/json"] as? [String: Any])?["schema"] else {
            return ["docs/openapi.json has no webhook \(event)"]
        }
        return validate(body, schema, at: event)
    }

    /// Problems with `value` against `schema` (empty when it fits).
    func validate(_ value: Any, _ schema: Any, at path: String) -> [String] {
        guard var schema = schema as? [String: Any] else { return ["\(path): the schema is not an object"] }
        if let reference = schema["$ref"] as? String {
            let name = reference.replacingOccurrences(of: "#/components/schemas/", with: "")
            guard let resolved = ((json.value["components"] as? [String: Any])?["schemas"] as? [String: Any])?[name] as? [String: Any]
            else {
                return ["\(path): no schema \(reference)"]
            }
            schema = resolved
        }
        var problems: [String] = []
        if let types = (schema["type"] as? String).map({ [$0] }) ?? schema["type"] as? [String] {
            guard types.contains(where: { Self.isType(value, $0) }) else { return ["\(path): \(Self.describe(value)) is not \(types)"] }
        }
        if let options = schema["enum"] as? [Any], !options.contains(where: { "\($0)" == "\(value)" }) {
            problems.append("\(path): \(value) is not one of \(options)")
        }
        if let pattern = schema["pattern"] as? String, let text = value as? String,
            text.range(of: pattern, options: .regularExpression) == nil
        {
            problems.append("\(path): \(text) does not match \(pattern)")
        }
        if let number = value as? NSNumber, !(value is Bool) {
            if let minimum = schema["minimum"] as? Double, number.doubleValue < minimum { problems.append("\(path): below \(minimum)") }
            if let maximum = schema["maximum"] as? Double, number.doubleValue > maximum { problems.append("\(path): above \(maximum)") }
        }
        if let object = value as? [String: Any] {
            for name in schema["required"] as? [String] ?? [] where object[name] == nil { problems.append("\(path): \(name) is missing") }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (name, item) in object {
                if let property = properties[name] {
                    problems += validate(item, property, at: "\(path).\(name)")
                } else if schema["additionalProperties"] as? Bool == false {
                    problems.append("\(path): \(name) is not allowed")
                } else if let additional = schema["additionalProperties"] as? [String: Any] {
                    problems += validate(item, additional, at: "\(path).\(name)")
                }
            }
        }
        if let array = value as? [Any], let items = schema["items"] {
            for (index, item) in array.enumerated() { problems += validate(item, items, at: "\(path)[\(index)]") }
        }
        return problems
    }

    static func isType(_ value: Any, _ type: String) -> Bool {
        switch type {
        case "null": return value is NSNull
        case "string": return value is String
        case "boolean": return Self.isBool(value)
        case "integer":
            guard let number = value as? NSNumber, !isBool(value) else { return false }
            return number.doubleValue == number.doubleValue.rounded()
        case "number": return value is NSNumber && !isBool(value)
        case "object": return value is [String: Any]
        case "array": return value is [Any]
        default: return false
        }
    }

    /// JSONSerialization gives booleans as NSNumber; tell them apart by their C type.
    static func isBool(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }

    static func describe(_ value: Any) -> String { "\(value)".prefix(80) + " (\(type(of: value)))" }
}

/// The parsed document, immutable once loaded.
struct SendableJSON: @unchecked Sendable {
    // Never mutated after init, only read.
    let value: [String: Any]
    init(_ value: [String: Any]) { self.value = value }
}
