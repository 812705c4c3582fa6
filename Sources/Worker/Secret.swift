/// A secret (a token, a password, a key). Its `value` is read where it is used; whatever
/// prints it (a log line, `dump`, string interpolation, a service dump) shows `<redacted>`.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public let value: String

    public init(_ value: String) { self.value = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: []) }
}
