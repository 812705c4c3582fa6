import Foundation

/// A job that can never succeed as given: it goes to the dead set with its code and message.
package enum JobRefusal: Error, Sendable, Hashable {
    case invalidPayload(String)
    case unknownPublisher(String)
    case notPossible(code: String, String)

    /// The code and message the dead job records.
    package var codeAndMessage: (code: String, message: String) {
        switch self {
        case .invalidPayload(let message): ("invalidPayload", "the payload is wrong: \(message)")
        case .unknownPublisher(let id): ("unknownPublisher", "no publisher \"\(id)\" in the catalog")
        case .notPossible(let code, let message): (code, message)
        }
    }
}
