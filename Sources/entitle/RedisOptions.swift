import ArgumentParser
import Foundation
import JobQueue
import Logging
import RedisClient

/// Options every command that talks to Redis takes.
struct RedisOptions: ParsableArguments {
    @Option(
        name: .long,
        help: """
            Redis URL: redis://[[user]:password@]host[:port][/db], redis+cluster://host:port,host:port,... (a Redis Cluster, \
            by seed nodes) or redis+sentinel://host:port,.../PRIMARY[/db] (a primary Sentinel watches) \
            (default: $ENTITLE_REDIS_URL or redis://127.0.0.1:6379).
            """)
    var redis: String?

    @Option(name: .customLong("redis-cluster"), help: "Redis Cluster seed nodes, host:port,host:port,... (instead of --redis).")
    var redisCluster: String?

    @Option(name: .long, help: "Key prefix (default: $ENTITLE_PREFIX or entitle).")
    var prefix: String?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error (default: $ENTITLE_LOG_LEVEL or info).")
    var logLevel: String?

    /// `ENTITLE_REDIS_URL`, when set and not empty.
    static var environmentURL: String? {
        ProcessInfo.processInfo.environment["ENTITLE_REDIS_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    var redisURL: String {
        if let redisCluster { return "redis+cluster://" + redisCluster }
        return redis ?? Self.environmentURL ?? "redis://127.0.0.1:6379"
    }

    func validate() throws {
        if redis != nil && redisCluster != nil { throw ValidationError("give --redis or --redis-cluster, not both") }
        do {
            _ = try RedisConfiguration(url: redisURL)
        } catch let error as RedisError {
            throw ValidationError("bad Redis URL: \(error.message)")
        }
        if let level = logLevel, Logger.Level(rawValue: level) == nil {
            throw ValidationError("unknown log level '\(level)'")
        }
        let prefix = keyPrefix
        guard !prefix.isEmpty, !prefix.contains("{"), !prefix.contains("}") else {
            throw ValidationError("a key prefix must be non-empty and hold no braces")
        }
        _ = try jobQueueConfiguration()
    }

    /// The queue's settings: the prefix, and the format new jobs' hashes are written in
    /// (`ENTITLE_JOB_FORMAT`: `4` unless set; `1`, `2` or `3` only while a version that reads no
    /// newer one runs beside this one; Jobs/README.md, "Formats").
    func jobQueueConfiguration() throws -> JobQueueConfiguration {
        var configuration = JobQueueConfiguration(prefix: keyPrefix)
        if let name = ProcessInfo.processInfo.environment["ENTITLE_JOB_FORMAT"], !name.isEmpty {
            guard let format = JobHashFormat(rawValue: name) else {
                throw ValidationError("ENTITLE_JOB_FORMAT must be 1, 2, 3 or 4, not '\(name.prefix(64))'")
            }
            configuration.hashFormat = format
        }
        return configuration
    }

    var keyPrefix: String { prefix ?? ProcessInfo.processInfo.environment["ENTITLE_PREFIX"] ?? "entitle" }

    func makeLogger(_ label: String) -> Logger { CLILogging.logger(label, level: logLevel) }

    func makeJobQueue(logger: Logger, connections: Int = 4) throws -> JobQueue {
        let pool = RedisConnectionPool(
            configuration: try RedisConfiguration(url: redisURL), maximumConnections: connections, logger: logger)
        return JobQueue(redis: pool, configuration: try jobQueueConfiguration(), logger: logger)
    }
}

/// Prints to standard error and exits 1: for failures after the arguments were accepted.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum JSONOutput {
    /// One JSON document on a line, keys sorted.
    static func line(_ object: Any) throws -> String {
        String(
            decoding: try JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed]),
            as: UTF8.self)
    }

    /// A typed document on a line, keys sorted.
    static func line(encoding value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}
