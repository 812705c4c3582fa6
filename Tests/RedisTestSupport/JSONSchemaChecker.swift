import Foundation

/// Checks JSON values (as `JSONSerialization` reads them) against the subset of JSON Schema
/// that `Jobs/*.schema.json` use: `type`, `enum`, `required`, `properties`,
/// `patternProperties`, `additionalProperties` (false or a schema), `items`, `pattern`,
/// `minLength`/`maxLength` (in Unicode scalars), `minimum`/`maximum`. A keyword outside that
/// subset is a problem too, so a schema cannot quietly say more than the tests check.
/// A test helper: no product depends on a schema validator.
public struct JSONSchemaChecker {
    public let schema: [String: Any]
    static let keywords: Set<String> = [
        "$schema", "$id", "title", "description", "contentMediaType", "type", "enum", "required", "properties",
        "patternProperties", "additionalProperties", "items", "pattern", "minLength", "maxLength", "minimum", "maximum",
    ]

    public init(schema: [String: Any]) { self.schema = schema }

    public init(contentsOf url: URL) throws {
        guard let schema = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any] else {
            throw SchemaError(message: "\(url.lastPathComponent) is not a JSON object")
        }
        self.init(schema: schema)
    }

    /// What is wrong with `value`, each problem with the path to it (`$.field`); empty when valid.
    public func problems(_ value: Any) -> [String] {
        var found: [String] = []
        check(value, against: schema, at: "$", into: &found)
        return found
    }

    /// `problems` of a JSON text.
    public func problems(json: String) -> [String] {
        guard let value = try? JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed]) else {
            return ["$: not JSON: \(json.prefix(200))"]
        }
        return problems(value)
    }

    private func check(_ value: Any, against schema: [String: Any], at path: String, into found: inout [String]) {
        for keyword in schema.keys where !Self.keywords.contains(keyword) {
            found.append("\(path): the checker does not know the schema keyword \(keyword)")
        }
        if let type = schema["type"] {
            let types = (type as? [String]) ?? [type as? String ?? ""]
            if !types.contains(where: { Self.value(value, is: $0) }) {
                found.append("\(path): \(Self.describe(value)) is not of type \(types.joined(separator: " or "))")
                return
            }
        }
        if let options = schema["enum"] as? [Any], !options.contains(where: { Self.equal($0, value) }) {
            found.append("\(path): \(Self.describe(value)) is none of \(options)")
        }
        if let text = value as? String {
            let length = text.unicodeScalars.count
            if let minimum = schema["minLength"] as? Int, length < minimum { found.append("\(path): shorter than \(minimum)") }
            if let maximum = schema["maxLength"] as? Int, length > maximum { found.append("\(path): longer than \(maximum)") }
            if let pattern = schema["pattern"] as? String, !Self.matches(text, pattern) {
                found.append("\(path): \(Self.describe(value)) does not match \(pattern)")
            }
        }
        if let number = Self.number(value) {
            if let minimum = (schema["minimum"] as? NSNumber)?.doubleValue, number < minimum {
                found.append("\(path): \(number) is below \(minimum)")
            }
            if let maximum = (schema["maximum"] as? NSNumber)?.doubleValue, number > maximum {
                found.append("\(path): \(number) is above \(maximum)")
            }
        }
        if let object = value as? [String: Any] {
            for name in schema["required"] as? [String] ?? [] where object[name] == nil {
                found.append("\(path): \(name) is missing")
            }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            let patterns = schema["patternProperties"] as? [String: Any] ?? [:]
            for (name, member) in object.sorted(by: { $0.key < $1.key }) {
                var known = false
                if let property = properties[name] as? [String: Any] {
                    known = true
                    check(member, against: property, at: "\(path).\(name)", into: &found)
                }
                for (pattern, property) in patterns where Self.matches(name, pattern) {
                    known = true
                    check(member, against: property as? [String: Any] ?? [:], at: "\(path).\(name)", into: &found)
                }
                guard !known else { continue }
                switch schema["additionalProperties"] {
                case let allowed as Bool where !allowed: found.append("\(path): \(name) is not allowed")
                case let property as [String: Any]: check(member, against: property, at: "\(path).\(name)", into: &found)
                default: break
                }
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, item) in array.enumerated() { check(item, against: items, at: "\(path)[\(index)]", into: &found) }
        }
    }

    /// A JSON boolean as `JSONSerialization` reads it: an `NSNumber` of C type `char` (numbers
    /// are `i`, `q` or `d`), since `value is Bool` holds for the integers 0 and 1 too.
    static func isBoolean(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }

    static func number(_ value: Any) -> Double? {
        guard !(value is String), !isBoolean(value), let number = value as? NSNumber else { return nil }
        return number.doubleValue
    }

    static func value(_ value: Any, is type: String) -> Bool {
        switch type {
        case "string": return value is String
        case "object": return value is [String: Any]
        case "array": return value is [Any]
        case "null": return value is NSNull
        case "boolean": return isBoolean(value)
        case "number": return number(value) != nil
        case "integer": return number(value).map { $0.rounded() == $0 } ?? false
        default: return false
        }
    }

    static func equal(_ left: Any, _ right: Any) -> Bool {
        if let left = left as? String, let right = right as? String { return left == right }
        if let left = number(left), let right = number(right) { return left == right }
        if left is NSNull && right is NSNull { return true }
        return false
    }

    static func matches(_ text: String, _ pattern: String) -> Bool {
        guard let expression = try? NSRegularExpression(pattern: pattern) else { return false }
        return expression.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }

    static func describe(_ value: Any) -> String {
        if let text = value as? String { return "\"\(text.prefix(80))\"" }
        return String(describing: value).prefix(80).description
    }
}

/// A schema that cannot be read.
public struct SchemaError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
