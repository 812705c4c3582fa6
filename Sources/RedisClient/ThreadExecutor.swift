import Foundation

/// A serial executor that runs every job on a dedicated OS thread.
///
/// Connection actors use it so that hiredis' blocking socket calls never run on the
/// cooperative thread pool (two threads on a two-core machine: one blocked call would
/// halve the whole process). The thread ends after `idleTimeout` without work and a new
/// one starts with the next job, so idle connections hold no thread and never keep a
/// finished process alive.
final class ThreadExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked Sendable: `jobs` and `threadRunning` are only touched with `condition` held.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var threadRunning = false
    private let name: String
    private let idleTimeout: TimeInterval

    init(name: String, idleTimeout: TimeInterval = 1) {
        self.name = name
        self.idleTimeout = idleTimeout
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        jobs.append(unowned)
        let start = !threadRunning
        threadRunning = true
        condition.signal()
        condition.unlock()
        if start {
            let thread = Thread { [self] in self.run() }
            thread.name = name
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Foundation keeps `Thread.name` to itself on Linux: the kernel's name for the thread
    /// (`top -H`, `perf`, `/proc/PID/task`) would stay its creator's, often the task pool's.
    /// The kernel keeps 15 bytes of it.
    private static func nameKernelThread(_ name: String) {
        let descriptor = open("/proc/thread-self/comm", O_WRONLY)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }

    private func run() {
        Self.nameKernelThread(name)
        var batch: [UnownedJob] = []
        while true {
            condition.lock()
            if jobs.isEmpty { _ = condition.wait(until: Date(timeIntervalSinceNow: idleTimeout)) }
            if jobs.isEmpty {
                threadRunning = false
                condition.unlock()
                return
            }
            swap(&batch, &jobs)
            condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedSerialExecutor()) }
            batch.removeAll(keepingCapacity: true)
        }
    }
}
