/// A secret (a token, a password, a key). Its `value` is read where it is used; whatever
/// prints it (a log line, `dump`, string interpolation, a service dump) shows `<redacted>`.
package struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    package let value: String

    package init(_ value: String) { self.value = value }

    package var description: String { "<redacted>" }
    package var debugDescription: String { "<redacted>" }
    package var customMirror: Mirror { Mirror(self, children: []) }
}
