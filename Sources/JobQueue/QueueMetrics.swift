import DurationUnits
import Metrics
import Synchronization

/// The queue's instruments, created once per (queue, job type) and reused. Labels are
/// queue names and registered job types: bounded, never ids.
final class QueueMetrics: Sendable {
    static let shared = QueueMetrics()

    struct JobInstruments: Sendable {
        let enqueued, started, succeeded, retried, deferred, dead, fenced: Counter
        /// From start to finish of one attempt.
        let runTime: Metrics.Timer
        /// From enqueue (or due time) to start.
        let waitTime: Metrics.Timer
    }

    struct QueueInstruments: Sendable {
        let reaped: Counter
        let pending, scheduled, active, dead, oldestPendingAge, consumers: Gauge
    }

    private let jobs = Mutex<[String: JobInstruments]>([:])
    private let queues = Mutex<[String: QueueInstruments]>([:])

    func forJob(queue: String, type: String) -> JobInstruments {
        jobs.withLock { cache in
            let key = queue + "\u{0}" + type
            if let instruments = cache[key] { return instruments }
            let labels = [("queue", queue), ("type", type)]
            let instruments = JobInstruments(
                enqueued: Counter(label: "entitle_jobs_enqueued_total", dimensions: labels),
                started: Counter(label: "entitle_jobs_started_total", dimensions: labels),
                succeeded: Counter(label: "entitle_jobs_succeeded_total", dimensions: labels),
                retried: Counter(label: "entitle_jobs_retried_total", dimensions: labels),
                deferred: Counter(label: "entitle_jobs_deferred_total", dimensions: labels),
                dead: Counter(label: "entitle_jobs_dead_total", dimensions: labels),
                fenced: Counter(label: "entitle_jobs_fenced_total", dimensions: labels),
                runTime: Metrics.Timer(label: "entitle_job_run_seconds", dimensions: labels, preferredDisplayUnit: .seconds),
                waitTime: Metrics.Timer(label: "entitle_job_wait_seconds", dimensions: labels, preferredDisplayUnit: .seconds)
            )
            cache[key] = instruments
            return instruments
        }
    }

    func forQueue(_ queue: String) -> QueueInstruments {
        queues.withLock { cache in
            if let instruments = cache[queue] { return instruments }
            let labels = [("queue", queue)]
            let instruments = QueueInstruments(
                reaped: Counter(label: "entitle_jobs_reaped_total", dimensions: labels),
                pending: Gauge(label: "entitle_queue_pending", dimensions: labels),
                scheduled: Gauge(label: "entitle_queue_scheduled", dimensions: labels),
                active: Gauge(label: "entitle_queue_active", dimensions: labels),
                dead: Gauge(label: "entitle_queue_dead", dimensions: labels),
                oldestPendingAge: Gauge(label: "entitle_queue_oldest_pending_age_seconds", dimensions: labels),
                consumers: Gauge(label: "entitle_queue_consumers", dimensions: labels)
            )
            cache[queue] = instruments
            return instruments
        }
    }

    func record(_ stats: QueueStats) {
        let instruments = forQueue(stats.name)
        instruments.pending.record(stats.pending)
        instruments.scheduled.record(stats.scheduled)
        instruments.active.record(stats.active)
        instruments.dead.record(stats.dead)
        instruments.oldestPendingAge.record(stats.oldestPendingAgeSeconds)
        instruments.consumers.record(stats.consumers)
    }
}
