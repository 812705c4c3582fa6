import Foundation

/// Kills registered child processes when this process dies of a fatal signal (a trap, a
/// segfault, an abort), so that a crash of `entitle run` does not leave its private
/// redis-server running. SIGKILL cannot be caught: a process killed that way still leaves
/// its children, as any process does.
///
/// The handler only calls `kill` and `sigaction`, which are async-signal-safe, then gives the
/// signal back to whatever handled it before (Swift's backtracer prints the crash).
public enum FatalSignalGuard {
    /// Kills `pid` with SIGKILL if this process dies of a fatal signal.
    public static func register(_ pid: pid_t) {
        installOnce()
        guard let slot = (0..<capacity).first(where: { guardedPIDs[$0] == 0 }) else { return }
        guardedPIDs[slot] = pid
    }

    /// Stops guarding `pid` (it exited or was stopped).
    public static func unregister(_ pid: pid_t) {
        for slot in 0..<capacity where guardedPIDs[slot] == pid { guardedPIDs[slot] = 0 }
    }

    static let capacity = 16
    static let signals: [Int32] = [SIGSEGV, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE]

    private static let installation: Void = {
        for signal in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = fatalSignalHandler
            sigemptyset(&action.sa_mask)
            action.sa_flags = 0
            var previous = sigaction()
            if sigaction(signal, &action, &previous) == 0 { previousActions[Int(signal)] = previous }
        }
    }()

    private static func installOnce() { _ = installation }
}

// Read by the signal handler, which may run on any thread at any time: plain C storage,
// written only by `register`/`unregister` (from start-up and shutdown paths).
nonisolated(unsafe) private var guardedPIDs = UnsafeMutablePointer<pid_t>.allocate(capacity: FatalSignalGuard.capacity).initialized(
    repeating: 0, count: FatalSignalGuard.capacity)
nonisolated(unsafe) private var previousActions = UnsafeMutablePointer<sigaction>.allocate(capacity: 65).initialized(
    repeating: sigaction(), count: 65)

private func fatalSignalHandler(_ signal: Int32) {
    for slot in 0..<FatalSignalGuard.capacity where guardedPIDs[slot] > 0 { kill(guardedPIDs[slot], SIGKILL) }
    // Give the signal back: returning re-runs the faulting instruction under the previous
    // handler (or the default action, which ends the process).
    // (abort() raises SIGABRT again itself after a handler returns.)
    sigaction(signal, previousActions + Int(signal), nil)
}

extension UnsafeMutablePointer {
    fileprivate func initialized(repeating value: Pointee, count: Int) -> Self {
        initialize(repeating: value, count: count)
        return self
    }
}
