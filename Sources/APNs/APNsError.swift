/// A failure of the APNs client: a request Entitle would not send, a key it cannot use, or
/// APNs unreachable. Refusals APNs answers are `APNsResponse`s, not errors.
public struct APNsError: Error, Sendable, Hashable, CustomStringConvertible {
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        public let name: String
        public var description: String { name }

        /// A header or payload Apple would refuse, caught before sending.
        public static let invalidRequest = Code(name: "invalidRequest")
        /// The key, key id or team id cannot make a provider token.
        public static let invalidConfiguration = Code(name: "invalidConfiguration")
        /// APNs could not be reached: the push was not sent (worth retrying).
        public static let unavailable = Code(name: "unavailable")
        /// The push went out but no answer came (a timeout, a connection lost mid-stream):
        /// APNs may have delivered it, so it is not sent again.
        public static let unanswered = Code(name: "unanswered")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
