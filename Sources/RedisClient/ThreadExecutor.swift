import Foundation

/// A serial executor that runs every job on one dedicated OS thread.
///
/// Connection actors use it so that hiredis' blocking socket calls never run on the
/// cooperative thread pool (two threads on a two-core machine: one blocked call would
/// halve the whole process).
final class ThreadExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked Sendable: `jobs` and `stopped` are only touched with `condition` held.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopped = false

    init(name: String) {
        let thread = Thread { [self] in self.run() }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        condition.lock()
        jobs.append(unowned)
        condition.signal()
        condition.unlock()
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Lets the thread finish the jobs it has and exit.
    func shutdown() {
        condition.lock()
        stopped = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        var batch: [UnownedJob] = []
        while true {
            condition.lock()
            while jobs.isEmpty && !stopped { condition.wait() }
            if jobs.isEmpty && stopped {
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
