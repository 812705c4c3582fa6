import Foundation
import Logging
import RedisClient

/// A private `redis-server` on a free loopback port, for `entitle run` and for tests.
///
/// Not for production: production points `ENTITLE_REDIS_URL` at its own Redis.
package final class LocalRedisServer: Sendable {
    package let port: Int
    package let directory: URL
    private let process: ChildProcess

    package var url: String { "redis://127.0.0.1:\(port)" }

    /// Starts redis-server and returns once it answers. A port taken between choosing
    /// and binding it (the server exits at once) means another try on another port.
    /// - Parameter appendOnly: AOF on, as production runs it (the demo); off for tests.
    package init(appendOnly: Bool = false, executable: String? = nil, logger: Logger) async throws {
        let binary = executable ?? Self.findExecutable()
        guard let binary else {
            throw RedisError(.connectionFailed, "redis-server not found on PATH (apt-get install redis-server)")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("entitle-redis-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for _ in 0..<5 {
            let port = try Self.freePort()
            let process = try ChildProcess(
                binary,
                [
                    "--port", String(port), "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                    "--appendonly", appendOnly ? "yes" : "no", "--maxmemory-policy", "noeviction", "--daemonize", "no",
                    "--logfile", directory.appendingPathComponent("redis.log").path,
                ])
            // A crash of this process must not leave the server running.
            FatalSignalGuard.register(process.pid)
            if await Self.answers(port: port, process: process) {
                self.port = port
                self.directory = directory
                self.process = process
                return
            }
            logger.debug("the private redis-server did not answer; trying another port", metadata: ["port": "\(port)"])
            if process.isRunning {
                process.signal(SIGKILL)
                _ = try? await process.wait(timeout: .seconds(5))
            }
            FatalSignalGuard.unregister(process.pid)
        }
        throw RedisError(.connectionFailed, "the private redis-server did not start (log in \(directory.path))")
    }

    /// Whether the server answers within 10 s, while it runs, and is this process's (on a
    /// port taken meanwhile, another server could answer).
    private static func answers(port: Int, process: ChildProcess) async -> Bool {
        let connection = RedisConnection(
            configuration: RedisConfiguration(
                host: "127.0.0.1", port: port, connectTimeout: .milliseconds(200), commandTimeout: .milliseconds(500),
                reconnectTimeout: .zero),
            // Refused connections while it starts are expected, not worth a line each.
            name: "probe", logger: Logger(label: "entitle.local-redis", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        var info: String?
        let deadline = ContinuousClock.now + .seconds(10)
        while info == nil && process.isRunning && ContinuousClock.now < deadline {
            info = (try? await connection.send(["INFO", "server"]))?.string
            if info == nil { try? await Task.sleep(for: .milliseconds(10)) }
        }
        await connection.disconnect()
        guard let info else { return false }
        return process.isRunning && info.split(whereSeparator: \.isNewline).contains { $0 == "process_id:\(process.pid)" }
    }

    /// Stops the server by `SHUTDOWN` (which writes the AOF out) and waits at most 5 s for
    /// it to exit; SIGKILL is the last resort.
    package func stop() async {
        defer { FatalSignalGuard.unregister(process.pid) }
        guard process.isRunning else {
            try? FileManager.default.removeItem(at: directory)
            return
        }
        let connection = RedisConnection(
            configuration: RedisConfiguration(host: "127.0.0.1", port: port, reconnectTimeout: .zero), name: "shutdown",
            logger: Logger(label: "entitle.local-redis", factory: { _ in SwiftLogNoOpLogHandler() })
        )
        _ = try? await connection.send(["SHUTDOWN"])
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(10)) }
        if process.isRunning {
            process.signal(SIGKILL)
            _ = try? await process.wait(timeout: .seconds(5))
        }
        try? FileManager.default.removeItem(at: directory)
    }

    package var processIdentifier: Int32 { process.pid }

    static func findExecutable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return (path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"])
            .map { "\($0)/redis-server" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Asks the kernel for a free TCP port on 127.0.0.1.
    package static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RedisError(.connectionFailed, "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw RedisError(.connectionFailed, "bind() failed") }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw RedisError(.connectionFailed, "getsockname() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
