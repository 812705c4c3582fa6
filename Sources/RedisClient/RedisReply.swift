/// A reply from Redis, copied out of hiredis' reply tree so that no C pointer leaves
/// the connection actor.
public enum RedisReply: Sendable, Hashable {
    /// A status reply such as `OK`.
    case status(String)
    /// An error reply. `RedisConnection.send` throws these; pipelines return them in place.
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([RedisReply])

    /// The reply as text: bulk strings, statuses and integers; `nil` for null, arrays and errors.
    public var string: String? {
        switch self {
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .status(let text): return text
        case .integer(let value): return String(value)
        default: return nil
        }
    }

    /// The reply as an integer: integer replies and bulk strings that hold a number.
    public var int: Int? {
        switch self {
        case .integer(let value): return Int(value)
        case .bulk, .status: return string.flatMap { Int($0) }
        default: return nil
        }
    }

    /// The elements of an array reply, `nil` otherwise.
    public var array: [RedisReply]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var isNull: Bool { self == .null }

    /// The reply itself, or its error thrown (`serverError`): for a pipeline's replies, which
    /// come back with their errors in place.
    public func checked() throws(RedisError) -> RedisReply {
        if case .error(let message) = self { throw RedisError(.serverError, message) }
        return self
    }

    /// A flat `[field, value, field, value]` array (HGETALL) as a dictionary.
    public var fieldValues: [String: String] {
        guard let elements = array else { return [:] }
        var result: [String: String] = [:]
        result.reserveCapacity(elements.count / 2)
        var index = 0
        while index + 1 < elements.count {
            if let key = elements[index].string, let value = elements[index + 1].string { result[key] = value }
            index += 2
        }
        return result
    }
}
