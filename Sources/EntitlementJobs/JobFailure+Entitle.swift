import AppStore
import EntitleCore
import JobQueue

extension JobFailure {
    /// The failure a handler reports for an error: Apple's and Redis's own classing decides
    /// between retry and dead; Apple's Retry-After is kept.
    static func from(_ error: any Error) -> any Error {
        switch error {
        case let failure as JobFailure: return failure
        case let refusal as JobRefusal: return JobFailure.permanent(refusal.codeAndMessage.code, refusal.codeAndMessage.message)
        case let error as AppStoreError:
            guard error.isRetryable else { return JobFailure.permanent("apple.\(error.code.rawValue)", error.message) }
            // Apple's Retry-After is a time it names; a day at most, so no header can park a job for ever.
            let wait = error.retryAfter.map {
                Duration.milliseconds(AppleTimestamp.milliseconds(min(max(0, $0.timeIntervalSinceNow), 86_400) * 1000))
            }
            return JobFailure.retryable("apple.\(error.code.rawValue)", error.message, after: wait)
        case let error as EntitlementStoreError where error.code == .fenced:
            // The job's lock passed to a later job (its lease ran out): it wrote nothing, or
            // claimed where its rerun finds itself the holder. Run again once the lock is
            // free, the attempt given back: a lapsed lease is no fault of the job's.
            return JobFailure.deferred("store.\(error.code.rawValue)", error.message, after: .milliseconds(200))
        case let error as EntitlementStoreError where error.code == .claimTaken:
            // Decided on owners that changed before the write, which wrote nothing: run again at
            // once, the attempt given back, to decide on what is read then.
            return JobFailure.deferred("store.\(error.code.rawValue)", error.message, after: .zero)
        case let error as EntitlementStoreError:
            return JobFailure.retryable("store.\(error.code.rawValue)", error.message)
        case let error as WorkerError:
            return JobFailure.retryable(error.code.rawValue, error.message)
        default:
            return error
        }
    }
}
