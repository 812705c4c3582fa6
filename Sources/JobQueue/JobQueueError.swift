/// An error from the job queue, with a code.
public struct JobQueueError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        /// A job type, queue name, payload or option that cannot be used.
        public static let invalidJob = Code(rawValue: "invalidJob")
        /// No job with that id (never existed, or its record expired).
        public static let jobNotFound = Code(rawValue: "jobNotFound")
        /// Redis answered with something the scripts never return.
        public static let unexpectedReply = Code(rawValue: "unexpectedReply")
        /// Redis failed part way through a bulk enqueue: `enqueued` says which jobs went in.
        public static let partiallyEnqueued = Code(rawValue: "partiallyEnqueued")
        public var description: String { rawValue }
    }

    public let code: Code
    public let message: String
    /// For `.partiallyEnqueued`: per request of the batch, its result, or `nil` when it was not enqueued.
    public let enqueued: [EnqueueResult?]

    public init(_ code: Code, _ message: String, enqueued: [EnqueueResult?] = []) {
        self.code = code
        self.message = message
        self.enqueued = enqueued
    }

    public var description: String { "\(code): \(message)" }
}
