import Foundation
import Hummingbird
import NIOCore

/// Runs a real Hummingbird server on 127.0.0.1 (a free port) for the duration of `body`.
enum LoopbackServer {
    static func run<Result: Sendable>(
        _ router: Router<BasicRequestContext>, _ body: @Sendable (String) async throws -> Result
    ) async throws -> Result {
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in continuation.yield(channel.localAddress?.port ?? 0) })
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

/// What a fake Apple endpoint received.
actor RequestLog {
    struct Entry: Sendable {
        var method: String
        var path: String
        var query: String
        var authorization: String?
        var body: [UInt8]
    }

    private(set) var entries: [Entry] = []

    func record(_ request: Request) async throws -> Entry {
        let body = try await request.body.collect(upTo: 1 << 20)
        let entry = Entry(
            method: request.method.rawValue, path: request.uri.path, query: request.uri.query ?? "",
            authorization: request.headers[.authorization], body: Array(body.readableBytesView))
        entries.append(entry)
        return entry
    }

    func count(_ path: String) -> Int { entries.filter { $0.path == path }.count }
}

extension Response {
    static func json(_ text: String, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func json(bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
