/// How a job's hash is written when it is enqueued (Jobs/README.md, "Formats"). Both are
/// always read.
public enum JobHashFormat: String, Sendable, Hashable, CaseIterable {
    /// Every field, as versions before 2026-11-26 wrote and need: only while such a version
    /// still runs beside this one (`ENTITLE_JOB_FORMAT=1`).
    case first = "1"
    /// What the key or a default says is left out: about 40 % fewer bytes a queued job.
    case second = "2"
}
