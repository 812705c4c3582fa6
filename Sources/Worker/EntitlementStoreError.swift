/// Why the entitlement store could not do what was asked.
public struct EntitlementStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }

        /// A stored document cannot be read (written by a newer version, or damaged).
        public static let unreadable = Code(rawValue: "unreadable")
        /// Too many concurrent writers changed the customer meanwhile; retry the job.
        public static let contended = Code(rawValue: "contended")
        /// The job's per-transaction lock passed to a later job, which already wrote.
        public static let fenced = Code(rawValue: "fenced")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
