import CHiredis
import DurationUnits
import Foundation
import Logging
import Synchronization

/// One connection to Redis over hiredis.
///
/// The actor's executor is a thread of its own: hiredis blocks in `read`/`write`, and only
/// this actor's synchronous methods touch the `redisContext`, so no blocking call ever
/// runs on the cooperative pool. Every call has a socket timeout; after any error on the
/// socket the context is dropped and the next call reconnects, with backoff.
public actor RedisConnection {
    private let executor: ThreadExecutor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    public nonisolated let configuration: RedisConfiguration
    public nonisolated let name: String
    private let logger: Logger
    private let metrics: RedisClientMetrics
    private var context: UnsafeMutablePointer<redisContext>?
    private var currentTimeout: Duration?
    private var consecutiveFailures = 0
    private var lastFailure: ContinuousClock.Instant?
    /// The commands of the write under way, formatted as RESP. Kept between writes (up to
    /// 1 MiB of capacity), so a round trip allocates no buffer: a fresh one per command cost
    /// a large `malloc` each, and glibc consolidated its free lists on every one of them.
    private var outgoing: [UInt8] = []
    /// Callers of `pipelineShared` waiting for the write under way to come back.
    private let waiting = Mutex(SharedWrites())
    private let sharedWriteCount = Atomic<Int>(0)
    /// Writes this connection sent with more than one caller's commands.
    package nonisolated var sharedWrites: Int { sharedWriteCount.load(ordering: .relaxed) }

    /// A caller waiting to go out with the next write: resumed with its replies, or with
    /// `nil` when it is to send that write itself.
    private struct WaitingCall {
        var commands: [[String]]
        var continuation: CheckedContinuation<[RedisReply]?, any Error>
    }

    private struct SharedWrites {
        var calls: [WaitingCall] = []
        /// A caller is sending a write now (or has been told to send the next one).
        var sending = false
    }

    /// - Parameters:
    ///   - name: shown as the thread name and as `CLIENT SETNAME`, to find the connection in `CLIENT LIST`.
    public init(
        configuration: RedisConfiguration, name: String = "entitle", logger: Logger,
        metrics: RedisClientMetrics = .shared
    ) {
        self.configuration = configuration
        self.name = name
        self.logger = logger
        self.metrics = metrics
        self.executor = ThreadExecutor(name: name)
    }

    isolated deinit {
        if let context { redisFree(context) }
    }

    /// Runs one command; an error reply is thrown as `RedisError` with code `.serverError`.
    /// - Parameter timeout: longest wait for the reply, for blocking commands; the configured
    ///   command timeout otherwise.
    @discardableResult
    public func send(_ command: [String], timeout: Duration? = nil) throws -> RedisReply {
        let reply = try roundTrip([command], timeout: timeout)[0]
        if case .error(let message) = reply { throw RedisError(.serverError, message) }
        return reply
    }

    /// Sends every command, then reads every reply: one round trip. Error replies come back
    /// in place as `.error`; a broken connection throws (some commands may have run).
    public func pipeline(_ commands: [[String]], timeout: Duration? = nil) throws -> [RedisReply] {
        try roundTrip(commands, timeout: timeout)
    }

    /// `pipeline` for callers sharing the connection: commands that come while a write is
    /// under way go out together in the next, one write and one read for them all, each
    /// caller's contiguous and in its order. An idle connection sends at once. The replies and
    /// errors are each caller's as `pipeline` gives them; a connection that breaks part way
    /// fails the callers whose replies had not all come. Uses the configured command timeout.
    public nonisolated func pipelineShared(_ commands: [[String]]) async throws -> [RedisReply] {
        let replies: [RedisReply]? = try await withCheckedThrowingContinuation { continuation in
            let send = waiting.withLock { waiting in
                if waiting.sending {
                    waiting.calls.append(WaitingCall(commands: commands, continuation: continuation))
                    return false
                }
                waiting.sending = true
                return true
            }
            if send { continuation.resume(returning: nil) }
        }
        if let replies { return replies }
        return try await sendShared(commands)
    }

    /// Sends `commands` and those of every caller waiting, in one round trip; then hands the
    /// next write to the first caller that came meanwhile, if any.
    private func sendShared(_ commands: [[String]]) throws -> [RedisReply] {
        let riders = waiting.withLock { waiting in
            defer { waiting.calls.removeAll(keepingCapacity: true) }
            return waiting.calls
        }
        var all = commands
        for rider in riders { all += rider.commands }
        if !riders.isEmpty { sharedWriteCount.add(1, ordering: .relaxed) }
        let (replies, failure) = exchange(all, timeout: nil, calls: 1 + riders.count)
        let next = waiting.withLock { waiting -> WaitingCall? in
            if waiting.calls.isEmpty {
                waiting.sending = false
                return nil
            }
            return waiting.calls.removeFirst()
        }
        next?.continuation.resume(returning: nil)
        // A caller whose replies all came before a failure has its answer; the rest fail.
        var offset = commands.count
        for rider in riders {
            let end = offset + rider.commands.count
            if end <= replies.count {
                rider.continuation.resume(returning: Array(replies[offset..<end]))
            } else {
                rider.continuation.resume(throwing: failure ?? RedisError(.connectionLost, "no reply"))
            }
            offset = end
        }
        if commands.count <= replies.count { return Array(replies[..<commands.count]) }
        throw failure ?? RedisError(.connectionLost, "no reply")
    }

    /// Runs a script by EVALSHA; on NOSCRIPT (which means nothing ran) runs it again by
    /// EVAL, which also puts it back in the server's script cache.
    @discardableResult
    public func run(_ script: RedisScript, keys: [String], arguments: [String]) throws -> RedisReply {
        try runPipelined(script, calls: [(keys, arguments)])[0].get()
    }

    /// Runs several calls of one script in one round trip; each result is its reply or its error.
    public func runPipelined(
        _ script: RedisScript, calls: [(keys: [String], arguments: [String])]
    ) throws -> [Result<RedisReply, RedisError>] {
        var replies = try roundTrip(calls.map { script.command(keys: $0.keys, arguments: $0.arguments) }, timeout: nil)
        let missing = replies.indices.filter {
            if case .error(let m) = replies[$0] { return m.hasPrefix("NOSCRIPT") } else { return false }
        }
        if !missing.isEmpty {
            logger.debug("script not cached by the server; sending its source", metadata: ["script": "\(script.name)"])
            let again = try roundTrip(
                missing.map { script.command(keys: calls[$0].keys, arguments: calls[$0].arguments, bySource: true) }, timeout: nil)
            for (slot, reply) in zip(missing, again) { replies[slot] = reply }
        }
        return replies.map { reply in
            if case .error(let message) = reply {
                return .failure(RedisError.script(script, replied: message))
            }
            return .success(reply)
        }
    }

    /// Sends one command without reading its reply: in subscribed mode (a `PING` whose
    /// answer comes among the messages). Throws `.connectionLost` when no socket is open,
    /// since a new one would not be subscribed.
    func write(_ command: [String]) throws {
        guard let context else { throw RedisError(.connectionLost, "not subscribed (no connection)") }
        try send([command], on: context)
        metrics.commands.increment()
    }

    /// The next message of a subscription, or `nil` when none came within `timeout`: the
    /// socket is polled first, so an idle subscription neither loses its connection (a
    /// hiredis read timeout would) nor costs the server anything.
    func receive(within timeout: Duration) throws -> RedisReply? {
        guard let context else { throw RedisError(.connectionLost, "not subscribed (no connection)") }
        var raw: UnsafeMutableRawPointer?
        // A reply already read into hiredis' buffer comes first.
        guard redisGetReplyFromReader(context, &raw) == REDIS_OK else { throw fail(context, stage: "receive") }
        if raw == nil {
            var descriptor = pollfd(fd: context.pointee.fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(clamping: max(0, timeout.milliseconds)))
            if ready == 0 || (ready < 0 && errno == EINTR) { return nil }
            guard ready > 0, redisBufferRead(context) == REDIS_OK else { throw fail(context, stage: "receive") }
            guard redisGetReplyFromReader(context, &raw) == REDIS_OK else { throw fail(context, stage: "receive") }
        }
        guard let raw else { return nil }  // part of a message so far
        defer { freeReplyObject(raw) }
        return Self.convert(raw.assumingMemoryBound(to: redisReply.self))
    }

    /// Closes the socket; the next command opens a new one.
    public func disconnect() {
        if let context {
            redisFree(context)
            self.context = nil
        }
    }

    /// Whether a socket is open now (it may still have been closed by the server).
    public var isConnected: Bool { context != nil }

    // MARK: - hiredis

    private func roundTrip(_ commands: [[String]], timeout: Duration?) throws -> [RedisReply] {
        let (replies, failure) = exchange(commands, timeout: timeout)
        if let failure { throw failure }
        return replies
    }

    /// Sends `commands` and reads their replies: every reply, or those read before the
    /// connection failed and the failure.
    /// - Parameter calls: how many callers' commands go in it (`pipelineShared`): the
    ///   round-trip counter counts each caller's, as if each had sent its own.
    private func exchange(_ commands: [[String]], timeout: Duration?, calls: Int = 1) -> ([RedisReply], RedisError?) {
        var replies: [RedisReply] = []
        do {
            let context = try connectedContext()
            let wanted = timeout ?? configuration.commandTimeout
            if wanted != currentTimeout {
                guard redisSetTimeout(context, timeval(wanted)) == REDIS_OK else { throw fail(context, stage: "set timeout") }
                currentTimeout = wanted
            }
            try send(commands, on: context)
            replies.reserveCapacity(commands.count)
            for _ in commands {
                var raw: UnsafeMutableRawPointer?
                guard redisGetReply(context, &raw) == REDIS_OK, let raw else { throw fail(context, stage: "read") }
                let reply = raw.assumingMemoryBound(to: redisReply.self)
                replies.append(Self.convert(reply))
                freeReplyObject(raw)
            }
        } catch let error as RedisError {
            return (replies, error)
        } catch {
            return (replies, RedisError(.connectionLost, "\(error)"))
        }
        metrics.commands.increment(by: Int64(commands.count))
        metrics.roundTrips.increment(by: Int64(calls))
        if calls > 1 { metrics.sharedWrites.increment() }
        return (replies, nil)
    }

    /// Writes `commands` to the socket, whole, before any reply is read. hiredis' own output
    /// buffer stays empty (so `redisGetReply` goes straight to reading): the bytes are
    /// written from `outgoing` instead of being copied into a buffer hiredis grows and frees
    /// on every write. The socket is blocking, with the send timeout `redisSetTimeout` set;
    /// a send that times out fails as `.timeout`, any other failure as `.connectionLost`.
    private func send(_ commands: [[String]], on context: UnsafeMutablePointer<redisContext>) throws {
        outgoing.removeAll(keepingCapacity: true)
        var size = 0
        for command in commands {
            size += 16
            for argument in command { size += argument.utf8.count + 16 }
        }
        outgoing.reserveCapacity(size)
        for command in commands { Self.format(command, into: &outgoing) }
        let fd = context.pointee.fd
        let failure: Int32? = outgoing.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                // MSG_NOSIGNAL: a peer gone away is an error here, not a SIGPIPE that ends the process.
                let written = Glibc.send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return written < 0 ? errno : EPIPE
                }
            }
            return nil
        }
        // A large write's buffer is not kept for an idle connection.
        if outgoing.capacity > 1 << 20 { outgoing = [] }
        if let failure {
            let timedOut = failure == EAGAIN || failure == EWOULDBLOCK
            throw fail(context, stage: "write", io: (timedOut ? .timeout : .connectionLost, String(cString: strerror(failure))))
        }
    }

    /// Drops a context that hiredis marked failed (or whose socket failed under `send`:
    /// `io`) and turns its error into a `RedisError`.
    private func fail(
        _ context: UnsafeMutablePointer<redisContext>, stage: String, io: (code: RedisError.Code, text: String)? = nil
    ) -> RedisError {
        let (code, text) = io ?? Self.hiredisError(context)
        redisFree(context)
        self.context = nil
        metrics.errors(code).increment()
        logger.warning("redis connection dropped", metadata: ["stage": "\(stage)", "code": "\(code)", "error": "\(text)"])
        return RedisError(code, "\(text.isEmpty ? "connection closed" : text) (\(stage))")
    }

    /// The error hiredis recorded on `context`, classified.
    private static func hiredisError(_ context: UnsafeMutablePointer<redisContext>) -> (code: RedisError.Code, text: String) {
        let text = withUnsafeBytes(of: context.pointee.errstr) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
        switch context.pointee.err {
        case REDIS_ERR_PROTOCOL, REDIS_ERR_OOM: return (.protocolError, text)
        case REDIS_ERR_IO where text.contains("temporarily unavailable") || text.contains("timed out"): return (.timeout, text)
        default: return (.connectionLost, text)
        }
    }

    private func connectedContext() throws -> UnsafeMutablePointer<redisContext> {
        if let context { return context }
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.reconnectTimeout
        while true {
            // Back off after failures so a dead server is not hammered.
            if consecutiveFailures > 0, let lastFailure {
                let backoff = Duration.milliseconds(min(1000, 10 << min(consecutiveFailures - 1, 7)))
                let wait = lastFailure + backoff - clock.now
                if wait > .zero { Thread.sleep(forTimeInterval: wait.seconds) }
            }
            do {
                let context = try openContext()
                if consecutiveFailures > 0 { metrics.reconnects.increment() }
                consecutiveFailures = 0
                self.context = context
                return context
            } catch let error as RedisError {
                consecutiveFailures += 1
                lastFailure = clock.now
                if clock.now >= deadline || error.code == .serverError {
                    metrics.errors(.connectionFailed).increment()
                    throw RedisError(.connectionFailed, "\(configuration.displayAddress): \(error.message)")
                }
            }
        }
    }

    private func openContext() throws -> UnsafeMutablePointer<redisContext> {
        guard let context = redisConnectWithTimeout(configuration.host, Int32(configuration.port), timeval(configuration.connectTimeout))
        else {
            throw RedisError(.connectionFailed, "cannot allocate a hiredis context")
        }
        if context.pointee.err != 0 {
            let text = withUnsafeBytes(of: context.pointee.errstr) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            redisFree(context)
            throw RedisError(.connectionFailed, text)
        }
        self.context = context
        currentTimeout = nil
        do {
            var setup: [[String]] = []
            if let password = configuration.password {
                setup.append(configuration.username.map { ["AUTH", $0, password] } ?? ["AUTH", password])
            }
            if configuration.database != 0 { setup.append(["SELECT", String(configuration.database)]) }
            setup.append(["CLIENT", "SETNAME", name.filter { !$0.isWhitespace }])
            for reply in try roundTrip(setup, timeout: configuration.connectTimeout) {
                if case .error(let message) = reply {
                    disconnect()
                    // The message never echoes the password.
                    throw RedisError(.serverError, message)
                }
            }
        } catch let error as RedisError {
            disconnect()
            throw error
        }
        self.context = nil
        return context
    }

    /// Appends one command to `buffer` as RESP (an array of bulk strings): arguments are
    /// binary-safe, never interpreted.
    private static func format(_ command: [String], into buffer: inout [UInt8]) {
        appendHeader(UInt8(ascii: "*"), command.count, to: &buffer)
        for argument in command {
            appendHeader(UInt8(ascii: "$"), argument.utf8.count, to: &buffer)
            buffer.append(contentsOf: argument.utf8)
            buffer.append(13)
            buffer.append(10)
        }
    }

    /// `*count\r\n` or `$length\r\n`: the marker, the value's decimal digits and CRLF.
    private static func appendHeader(_ marker: UInt8, _ value: Int, to buffer: inout [UInt8]) {
        buffer.append(marker)
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            buffer.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
        buffer.append(13)
        buffer.append(10)
    }

    private static func convert(_ reply: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let value = reply.pointee
        switch value.type {
        case REDIS_REPLY_STRING:
            return .bulk(value.str.map { Array(UnsafeRawBufferPointer(start: $0, count: Int(value.len))) } ?? [])
        case REDIS_REPLY_STATUS:
            return .status(
                value.str.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(value.len)), as: UTF8.self) } ?? "")
        case REDIS_REPLY_ERROR:
            return .error(value.str.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(value.len)), as: UTF8.self) } ?? "")
        case REDIS_REPLY_INTEGER:
            return .integer(value.integer)
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            elements.reserveCapacity(Int(value.elements))
            for index in 0..<Int(value.elements) {
                if let element = value.element[index] { elements.append(convert(element)) } else { elements.append(.null) }
            }
            return .array(elements)
        default:
            return .null
        }
    }
}

extension timeval {
    init(_ duration: Duration) {
        let microseconds = duration.nanoseconds / 1000
        self.init(tv_sec: Int(microseconds / 1_000_000), tv_usec: Int(microseconds % 1_000_000))
    }
}
