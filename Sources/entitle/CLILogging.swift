import Foundation
import Logging

/// The commands' loggers. Logs go to standard error, so `--json` output on standard output
/// stays parseable.
enum CLILogging {
    private static let bootstrap: Void = LoggingSystem.bootstrap(StreamLogHandler.standardError)

    /// A logger at `level`, else `ENTITLE_LOG_LEVEL`, else info.
    static func logger(_ label: String, level: String?) -> Logger {
        Self.bootstrap
        var logger = Logger(label: label)
        let level = level ?? ProcessInfo.processInfo.environment["ENTITLE_LOG_LEVEL"] ?? "info"
        logger.logLevel = Logger.Level(rawValue: level) ?? .info
        return logger
    }
}
