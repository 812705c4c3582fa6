import Synchronization

/// A value read from the environment and secret files, read again on request (SIGHUP), so
/// rotated credentials take effect without a restart. A failed reload keeps the value as it was.
public final class Reloadable<Value: Sendable>: Sendable {
    private let state: Mutex<Value>
    private let load: @Sendable () throws -> Value

    public init(_ load: @escaping @Sendable () throws -> Value) rethrows {
        self.state = Mutex(try load())
        self.load = load
    }

    /// A value that never changes.
    public init(constant value: Value) {
        self.state = Mutex(value)
        self.load = { value }
    }

    public var current: Value { state.withLock { $0 } }

    /// Loads again; on failure the current value stays and the error is thrown.
    public func reload() throws {
        let value = try load()
        state.withLock { $0 = value }
    }
}

// Whatever holds secrets prints as a placeholder.
extension Reloadable: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String { "Reloadable(<redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: []) }
}
