/// How a job's hash is written when it is enqueued and when it succeeds (Jobs/README.md,
/// "Formats"). All are always read.
public enum JobHashFormat: String, Sendable, Hashable, CaseIterable {
    /// Every field, as versions before 2026-11-26 wrote and need: only while such a version
    /// still runs beside this one (`ENTITLE_JOB_FORMAT=1`).
    case first = "1"
    /// What the key or a default says is left out: about 40 % fewer bytes a queued job. Only
    /// while a version that reads no third runs beside this one (`ENTITLE_JOB_FORMAT=2`).
    case second = "2"
    /// The second, and no `status` while the job is queued: a queued job is 11 % smaller.
    /// Only while a version that reads no fourth runs beside this one (`ENTITLE_JOB_FORMAT=3`).
    case third = "3"
    /// The third, and a succeeded job's result kept deflated, in pieces Redis keeps in its
    /// compact encoding (`StoredResult`): a finished receipt job is about a third the bytes.
    case fourth = "4"

    /// Whether a succeeded job's result is written as `StoredResult` makes it.
    var packsResults: Bool { self == .fourth }
}
