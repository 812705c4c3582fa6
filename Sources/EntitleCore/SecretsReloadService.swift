import Logging
import ServiceLifecycle
import UnixSignals

/// Reads secrets again on SIGHUP (the `NAME_FILE` files may have changed): an operator
/// rotates a credential by writing the old and the new value into its file, sending
/// SIGHUP, and later removing the old one and sending SIGHUP again.
package struct SecretsReloadService: Service, CustomStringConvertible {
    let reloads: [(name: String, reload: @Sendable () throws -> Void)]
    let logger: Logger

    package init(_ reloads: [(name: String, reload: @Sendable () throws -> Void)], logger: Logger) {
        self.reloads = reloads
        self.logger = logger
    }

    package var description: String { "SecretsReloadService(\(reloads.map(\.name).joined(separator: ", ")))" }

    package func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        try await cancelWhenGracefulShutdown {
            for await _ in signals {
                reloadAll()
            }
        }
    }

    /// Reloads everything; a failure keeps the old value of that part and is logged (by
    /// variable, never by value).
    package func reloadAll() {
        for (name, reload) in reloads {
            do {
                try reload()
                logger.notice("secrets reloaded", metadata: ["what": "\(name)"])
            } catch {
                logger.error("secrets not reloaded; the previous ones stay", metadata: ["what": "\(name)", "error": "\(error)"])
            }
        }
    }
}
