/// Why the worker could not start or run a job's Apple road.
package struct WorkerError: Error, Sendable, Hashable, CustomStringConvertible {
    package struct Code: RawRepresentable, Sendable, Hashable {
        package let rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }

        /// The configuration (catalog, environment variables) is wrong: fix it and start again.
        package static let invalidConfiguration = Code(rawValue: "invalidConfiguration")
        /// A needed service (the simulator, in development) could not be reached.
        package static let appleUnavailable = Code(rawValue: "appleUnavailable")
    }

    package let code: Code
    package let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}
