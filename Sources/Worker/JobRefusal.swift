import AppStore
import JobQueue

/// A job that can never succeed as given: it goes to the dead set with this message.
enum JobRefusal: Error {
    case invalidPayload(String)
    case unknownPublisher(String)
    case notPossible(code: String, String)

    var failure: JobFailure {
        switch self {
        case .invalidPayload(let message): .permanent("invalidPayload", "the payload is wrong: \(message)")
        case .unknownPublisher(let id): .permanent("unknownPublisher", "no publisher \"\(id)\" in the catalog")
        case .notPossible(let code, let message): .permanent(code, message)
        }
    }
}

extension JobFailure {
    /// The failure a handler reports for an error: Apple's and Redis's own classing decides
    /// between retry and dead; Apple's Retry-After is kept.
    static func from(_ error: any Error) -> any Error {
        switch error {
        case let failure as JobFailure: return failure
        case let refusal as JobRefusal: return refusal.failure
        case let error as AppStoreError:
            guard error.isRetryable else { return JobFailure.permanent("apple.\(error.code.rawValue)", error.message) }
            // Apple's Retry-After is a time it names; a day at most, so no header can park a job for ever.
            let wait = error.retryAfter.map { Duration.milliseconds(AppleTimestamp.milliseconds(min(max(0, $0.timeIntervalSinceNow), 86_400) * 1000)) }
            return JobFailure.retryable("apple.\(error.code.rawValue)", error.message, after: wait)
        case let error as EntitlementStoreError:
            return JobFailure.retryable("store.\(error.code.rawValue)", error.message)
        case let error as WorkerError:
            return JobFailure.retryable(error.code.rawValue, error.message)
        default:
            return error
        }
    }
}
