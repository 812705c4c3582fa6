/// Why the simulator refused a request or a configuration.
public struct SimulatorError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// The catalog, keys or options are wrong.
        public static let invalidConfiguration = Code(rawValue: "invalid_configuration")
        /// A control request is malformed or names something impossible.
        public static let invalidRequest = Code(rawValue: "invalid_request")
        /// The product, transaction or subscription does not exist.
        public static let notFound = Code(rawValue: "not_found")
        /// The request does not fit the current state (refunding a refunded transaction).
        public static let conflict = Code(rawValue: "conflict")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
