import Foundation
import Hummingbird
import Logging
import NIOCore

/// Runs a real Hummingbird server on 127.0.0.1 (a free port) for the duration of `body`.
public enum LoopbackServer {
    public static func run<Result: Sendable>(
        _ router: Router<BasicRequestContext>, _ body: @Sendable (String) async throws -> Result
    ) async throws -> Result {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        // Tests stop servers by cancelling them, which Hummingbird reports as errors: keep quiet.
        var logger = Logger(label: "loopback")
        logger.logLevel = .critical
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                try await app.run()
                return nil
            }
            var iterator = ports.makeAsyncIterator()
            guard let port = await iterator.next(), port > 0 else { throw CancellationError() }
            let result = try await body("http://127.0.0.1:\(port)")
            group.cancelAll()
            return result
        }
    }
}

/// What a loopback endpoint received; tests await entries instead of sleeping.
public actor RequestLog {
    public struct Entry: Sendable {
        public var method: String
        public var path: String
        public var query: String
        public var authorization: String?
        public var body: [UInt8]
    }

    public private(set) var entries: [Entry] = []
    private var waiters: [(id: UUID, path: String, count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    public init() {}

    @discardableResult
    public func record(_ request: Request) async throws -> Entry {
        let body = try await request.body.collect(upTo: 1 << 20)
        let entry = Entry(
            method: request.method.rawValue, path: request.uri.path, query: request.uri.query ?? "",
            authorization: request.headers[.authorization], body: Array(body.readableBytesView))
        entries.append(entry)
        waiters.removeAll { waiter in
            guard count(waiter.path) >= waiter.count else { return false }
            waiter.continuation.resume()
            return true
        }
        return entry
    }

    public func count(_ path: String) -> Int { entries.filter { $0.path == path }.count }

    /// The entries for `path` once there are at least `count`, or after `timeout` (whatever
    /// has arrived, so the caller's expectations fail with a clear count).
    public func wait(for path: String, count: Int, timeout: Duration = .seconds(20)) async -> [Entry] {
        if self.count(path) < count {
            let id = UUID()
            let timer = Task {
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                self.timeOut(id)
            }
            await withCheckedContinuation { continuation in waiters.append((id, path, count, continuation)) }
            timer.cancel()
        }
        return entries.filter { $0.path == path }
    }

    private func timeOut(_ id: UUID) {
        waiters.removeAll { waiter in
            guard waiter.id == id else { return false }
            waiter.continuation.resume()
            return true
        }
    }
}

extension Response {
    public static func json(_ text: String, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    public static func json(bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
