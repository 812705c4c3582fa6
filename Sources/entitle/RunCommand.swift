import ArgumentParser
import Foundation
import JobQueue
import Logging
import RedisClient
import ServiceLifecycle

/// `entitle run`: the whole engine on one machine with nothing configured: a private
/// redis-server (unless `ENTITLE_REDIS_URL` is set), workers, and jobs flowing through them.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Start a private Redis (unless $ENTITLE_REDIS_URL is set) and workers, and show jobs flowing."
    )

    @OptionGroup var options: RedisOptions

    @Option(help: "How many demo jobs to enqueue.")
    var jobs: Int = 2000

    @Option(help: "Worker concurrency.")
    var concurrency: Int = 32

    @Flag(help: "Exit after the demo instead of serving until Ctrl-C.")
    var once = false

    func validate() throws {
        guard (1...1_000_000).contains(jobs) else { throw ValidationError("--jobs must be 1-1000000") }
        guard (1...10_000).contains(concurrency) else { throw ValidationError("--concurrency must be 1-10000") }
    }

    func run() async throws {
        var logger = options.makeLogger("entitle.run")
        if options.logLevel == nil && ProcessInfo.processInfo.environment["ENTITLE_LOG_LEVEL"] == nil { logger.logLevel = .warning }
        var privateRedis: LocalRedisServer?
        var redisURL = options.redisURL
        if options.redis == nil && RedisOptions.environmentURL == nil {
            let server = try await LocalRedisServer(appendOnly: true, logger: logger)
            privateRedis = server
            redisURL = server.url
            say("started a private redis-server at \(server.url) (AOF on, data in \(server.directory.path))")
        }

        do {
            try await serve(redisURL: redisURL, logger: logger)
        } catch {
            await privateRedis?.stop()
            throw error
        }
        await privateRedis?.stop()
    }

    private func serve(redisURL: String, logger: Logger) async throws {
        let pool = RedisConnectionPool(configuration: try RedisConfiguration(url: redisURL), maximumConnections: 4, logger: logger)
        let jobQueue = JobQueue(redis: pool, configuration: JobQueueConfiguration(prefix: options.keyPrefix), logger: logger)
        let worker = WorkerService(
            configuration: .init(concurrency: ["default": concurrency]), jobQueue: jobQueue, registry: .builtIn(), logger: logger
        )
        let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        say("started a worker: queue default, concurrency \(concurrency)")
        let once = self.once
        let jobs = self.jobs
        let url = redisURL
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            tasks.addTask {
                try await Self.demo(jobQueue, jobs: jobs)
                if once {
                    await group.triggerGracefulShutdown()
                } else {
                    say(
                        "\nserving until Ctrl-C; try:\n  ENTITLE_REDIS_URL=\(url) entitle enqueue noop --payload '{\"sleepMs\":10}' --count 1000\n  ENTITLE_REDIS_URL=\(url) entitle queues"
                    )
                }
            }
            try await tasks.waitForAll()
        }
        pool.close()
    }

    /// Enqueues noop jobs (a few of which fail once and retry) and prints progress until
    /// every one has succeeded.
    private static func demo(_ jobQueue: JobQueue, jobs: Int) async throws {
        let clock = ContinuousClock()
        let began = clock.now
        let before = try await jobQueue.stats(queue: "default").total("succeeded")
        var requests = (0..<jobs).map { _ in EnqueueRequest(type: "noop", payload: #"{"sleepMs":2}"#) }
        for index in stride(from: 0, to: jobs, by: max(1, jobs / 5)) { requests[index].payload = #"{"failTimes":1}"# }
        let results = try await jobQueue.enqueue(batch: requests)
        say(
            "enqueued \(results.count) noop jobs (\(requests.filter { $0.payload.contains("failTimes") }.count) of them fail once, then retry)"
        )
        while true {
            let stats = try await jobQueue.stats(queue: "default")
            let done = stats.total("succeeded") - before
            say(
                String(
                    format: "  %5.1fs  pending %6d  active %4d  retrying %4d  succeeded %6d", (clock.now - began).seconds,
                    stats.pending, stats.active, stats.scheduled, done))
            if done >= jobs { break }
            try await Task.sleep(for: .milliseconds(250))
        }
        if let sample = try await jobQueue.job(id: results[0].id, queue: "default") {
            say("job \(sample.id): \(sample.status.rawValue) after \(sample.attempt) attempt(s), result \(sample.result ?? "null")")
        }
        let elapsed = (clock.now - began).seconds
        say(String(format: "all %d jobs succeeded in %.2fs (%.0f jobs/s)", jobs, elapsed, Double(jobs) / elapsed))
    }
}

/// Writes a line to standard output at once (unbuffered), so progress reaches a pipe or
/// file as it happens, not when the demo exits.
private func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
