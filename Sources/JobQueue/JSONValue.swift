import Foundation

/// Any JSON value, typed: for documents that embed JSON a job carries (its payload, its
/// result) and for requests read field by field. Integers stay integers.
package enum JSONValue: Codable, Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case unsigned(UInt64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// JSON text parsed (by Foundation's JSONSerialization: a key given twice keeps its last
    /// value, as every reader of Entitle's JSON always did); throws when it is not JSON.
    package init(parsing bytes: some Collection<UInt8>) throws {
        self = JSONValue(serialized: try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]))
    }

    /// What JSONSerialization returns, typed (a Boolean is the NSNumber whose type is `c`).
    private init(serialized value: Any) {
        switch value {
        case let text as String: self = .string(text)
        case let object as [String: Any]: self = .object(object.mapValues(JSONValue.init(serialized:)))
        case let array as [Any]: self = .array(array.map(JSONValue.init(serialized:)))
        case let number as NSNumber:
            switch String(cString: number.objCType) {
            case "c", "B": self = .bool(number.boolValue)
            case "d", "f": self = .number(number.doubleValue)
            case "Q", "L", "I", "S", "C": self = number.uint64Value > UInt64(Int64.max) ? .unsigned(number.uint64Value) : .integer(number.int64Value)
            default: self = .integer(number.int64Value)
            }
        default: self = .null
        }
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(UInt64.self) {
            self = .unsigned(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .unsigned(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    package var string: String? { if case .string(let value) = self { value } else { nil } }
    package var object: [String: JSONValue]? { if case .object(let value) = self { value } else { nil } }
}
