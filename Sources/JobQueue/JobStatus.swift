/// Where a job is in its life.
public enum JobStatus: String, Sendable, Codable, CaseIterable {
    /// Waiting in the pending list.
    case queued
    /// Enqueued with a delay; waiting in the scheduled set.
    case scheduled
    /// Claimed by a consumer, which holds its lease.
    case processing
    /// Failed with a retryable error; waiting in the scheduled set for its next attempt.
    case retrying
    case succeeded
    /// Out of attempts or failed permanently; in the dead set.
    case failed

    public var isFinished: Bool { self == .succeeded || self == .failed }
}
