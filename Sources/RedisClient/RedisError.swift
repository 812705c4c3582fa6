/// An error from the Redis client, with a code saying what kind of failure it was.
public struct RedisError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure this was.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        fileprivate enum Base: String, Sendable, Hashable {
            case connectionFailed, connectionLost, timeout, protocolError, serverError, invalidURL
            case unexpectedReply, poolClosed, crossSlot
        }
        fileprivate let base: Base
        /// Could not connect, authenticate or select the database.
        public static let connectionFailed = Code(base: .connectionFailed)
        /// An established connection broke (reset, closed by the server, `CLIENT KILL`).
        public static let connectionLost = Code(base: .connectionLost)
        /// No reply within the command timeout; the connection is dropped.
        public static let timeout = Code(base: .timeout)
        /// hiredis could not parse what the server sent.
        public static let protocolError = Code(base: .protocolError)
        /// The server answered with an error reply; `message` holds its text.
        public static let serverError = Code(base: .serverError)
        /// A `redis://` URL that cannot be used.
        public static let invalidURL = Code(base: .invalidURL)
        /// A reply of a shape the caller did not expect.
        public static let unexpectedReply = Code(base: .unexpectedReply)
        /// The pool was closed.
        public static let poolClosed = Code(base: .poolClosed)
        /// A command or script names keys in more than one Redis Cluster slot (refused before
        /// it is sent, on every topology for scripts, so a single-node test catches it too).
        public static let crossSlot = Code(base: .crossSlot)
        public var description: String { base.rawValue }
    }

    public let code: Code
    /// A human-readable explanation. Never contains command arguments (they may be secrets).
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// A script's error reply. The server's text comes first, so that `isRetryable` reads a
    /// script refused while the server loads or is busy (`LOADING ...`, `BUSY ...`) as what
    /// it is; the script's name follows.
    static func script(_ script: RedisScript, replied message: String) -> RedisError {
        RedisError(.serverError, "\(message) (script \(script.name))")
    }

    /// Whether running the same command again later may succeed. Server errors are permanent,
    /// except for the transient states Redis names (LOADING, BUSY, TRYAGAIN, MASTERDOWN,
    /// CLUSTERDOWN, and READONLY from a primary that was just demoted).
    public var isRetryable: Bool {
        switch code.base {
        case .connectionFailed, .connectionLost, .timeout, .poolClosed: return true
        case .serverError:
            return ["LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY"].contains { message.hasPrefix($0) }
        default: return false
        }
    }

    public var description: String { "RedisError(\(code)): \(message)" }
}
