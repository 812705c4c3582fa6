import Synchronization

/// A value read from the environment and secret files, read again on request (SIGHUP), so
/// rotated credentials take effect without a restart. A failed reload keeps the value as it was.
package final class Reloadable<Value: Sendable>: Sendable {
    private let state: Mutex<Value>
    private let load: @Sendable () throws -> Value

    package init(_ load: @escaping @Sendable () throws -> Value) rethrows {
        self.state = Mutex(try load())
        self.load = load
    }

    /// A value that never changes.
    package init(constant value: Value) {
        self.state = Mutex(value)
        self.load = { value }
    }

    package var current: Value { state.withLock { $0 } }

    /// Loads again; on failure the current value stays and the error is thrown.
    package func reload() throws {
        let value = try load()
        state.withLock { $0 = value }
    }
}

// Whatever holds secrets prints as a placeholder.
extension Reloadable: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    package var description: String { "Reloadable(<redacted>)" }
    package var debugDescription: String { description }
    package var customMirror: Mirror { Mirror(self, children: []) }
}
