import Foundation
import Synchronization

/// A child process, spawned with `posix_spawn`, an empty signal mask and default signal
/// actions, its output going to files. Used for the private redis-server and in tests.
///
/// Not Foundation's `Process`: that passes on the spawning thread's blocked signals (a
/// child started from a Swift concurrency thread would ignore SIGTERM), and its child
/// monitoring got in the way of swift-service-lifecycle's signal handling.
package final class ChildProcess: Sendable {
    package let pid: pid_t
    package let outputPath: String
    package let errorPath: String
    private let exitStatus = Mutex<Int32?>(nil)

    package init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("entitle-child-\(UUID().uuidString.prefix(8))").path
        outputPath = base + ".out"
        errorPath = base + ".err"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, errorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGPIPE)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard status == 0 else { throw SpawnError(message: "posix_spawn \(executable): \(String(cString: strerror(status)))") }
        self.pid = pid
    }

    package func signal(_ signal: Int32) { kill(pid, signal) }

    /// Whether the process has not exited yet (reaps it when it has).
    package var isRunning: Bool {
        exitStatus.withLock { status in
            if status != nil { return false }
            var raw: Int32 = 0
            guard waitpid(pid, &raw, WNOHANG) == pid else { return true }
            let signal = raw & 0x7f
            status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
            return false
        }
    }

    /// Waits for the process to exit and returns its exit status (128+N for signal N).
    package func wait(timeout: Duration = .seconds(60)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while true {
            if !isRunning, let status = exitStatus.withLock({ $0 }) { return status }
            if ContinuousClock.now >= deadline {
                kill(pid, SIGKILL)
                throw SpawnError(message: "process \(pid) did not exit in time; output:\n\(output)\n\(errors)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Runs to completion and returns (exit status, standard output, standard error).
    package static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        timeout: Duration = .seconds(60)
    ) async throws -> (status: Int32, output: String, errors: String) {
        let child = try ChildProcess(executable, arguments, environment: environment)
        let status = try await child.wait(timeout: timeout)
        return (status, child.output, child.errors)
    }

    /// What the process wrote to standard output so far.
    package var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    /// What the process wrote to standard error (its logs) so far.
    package var errors: String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }

    deinit {
        try? FileManager.default.removeItem(atPath: outputPath)
        try? FileManager.default.removeItem(atPath: errorPath)
    }
}

package struct SpawnError: Error, CustomStringConvertible {
    package let message: String
    package init(message: String) { self.message = message }
    package var description: String { message }
}
