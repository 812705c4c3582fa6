/// How a job's hash is written when it is enqueued (Jobs/README.md, "Formats"). All are
/// always read.
public enum JobHashFormat: String, Sendable, Hashable, CaseIterable {
    /// Every field, as versions before 2026-11-26 wrote and need: only while such a version
    /// still runs beside this one (`ENTITLE_JOB_FORMAT=1`).
    case first = "1"
    /// What the key or a default says is left out: about 40 % fewer bytes a queued job. Only
    /// while a version that reads no third runs beside this one (`ENTITLE_JOB_FORMAT=2`).
    case second = "2"
    /// The second, and no `status` while the job is queued: a queued job is 11 % smaller.
    case third = "3"
}
