/// Why the worker could not start or run a job's Apple road.
public struct WorkerError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The configuration (catalog, environment variables) is wrong: fix it and start again.
        public static let invalidConfiguration = Code(rawValue: "invalidConfiguration")
        /// A needed service (the simulator, in development) could not be reached.
        public static let appleUnavailable = Code(rawValue: "appleUnavailable")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
