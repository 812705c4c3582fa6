import Foundation
import HTTPAPI
import LocalProcesses
import NIOPosix
import RedisClient
import RedisTestSupport
import Testing

/// Clients that connect and then send nothing, half a request head, or a head and no body
/// cannot hold the API: others are served meanwhile, and they are closed after the timeouts.
///
/// One test at a time: both time a server's deadlines, and the first one's 2,000 connections
/// load the event loops this process's servers share (beside each other, in a loaded full
/// run, the second's idle close was once not seen within 30 s).
@Suite(.serialized) struct SlowConnectionTests {
    @Test(.timeLimit(.minutes(3))) func halfOpenConnectionsAreClosedAndOthersServedMeanwhile() async throws {
        EntitleAPI.raiseOpenFileLimit()
        try await APIStack.run(
            "slow",
            configure: {
                // Long enough that all 2,000 are open together in a debug build on a loaded
                // machine (at 10 s, a loaded full run once had 429 closed before the count; at
                // 20 s, a full run beside two benchmarks had 172).
                $0.headerTimeout = .seconds(35)
                $0.requestTimeout = .seconds(40)
            }
        ) { api in
            let port = try #require(URL(string: api.url)?.port)
            // 2,000 connections: a third send nothing, a third half a head, a third a whole head
            // announcing a body that never comes.
            let partial = [
                "", "GET /healthz HTTP/1.1\r\nHost: x\r\n", "POST /v1/purchases HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
            ]
            let sockets = try await Self.blocking { try (0..<2000).map { try Self.connect(port: port, sending: partial[$0 % 3]) } }
            defer { for socket in sockets { close(socket) } }
            let stillOpen = try await Self.blocking { try Self.waitUntilClosed(sockets, deadline: .now()) }
            #expect(stillOpen == 2000, "all 2,000 are open while healthz is asked")

            // Five answers in a row, each within a second (the median, so one scheduling hiccup
            // of a loaded test machine does not decide).
            var times: [Duration] = []
            for _ in 0..<5 {
                let started = ContinuousClock.now
                #expect(try await api.call(.GET, "/healthz", token: nil, timeout: .seconds(5)).status == 200)
                times.append(ContinuousClock.now - started)
            }
            #expect(times.sorted()[2] < .seconds(1), "healthz answered in \(times) beside 2,000 idle connections")

            // Every one of them is closed by the server once its timeout passes.
            let open = try await Self.blocking { try Self.waitUntilClosed(sockets, deadline: .now() + 80) }
            #expect(open == 0, "\(open) of 2,000 connections still open 80 s later")
            #expect(try await api.call(.GET, "/healthz", token: nil).status == 200)
        }
    }

    /// A keep-alive connection is closed once idle; a request being answered (a long poll)
    /// is never cut by any deadline.
    @Test(.timeLimit(.minutes(2))) func idleKeepAliveConnectionsCloseAndLongPollsAreNotCut() async throws {
        // Its own event loop: the deadlines are timed on the connection's loop, and in loaded
        // full runs, on the loops every server of this process shares, an idle connection was
        // three times not closed within 30 s.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { group.shutdownGracefully { _ in } }
        try await APIStack.run(
            "keep-alive", eventLoopGroup: group,
            configure: {
                $0.headerTimeout = .seconds(1)
                $0.requestTimeout = .seconds(1)
                $0.idleTimeout = .seconds(2)
            }
        ) { api in
            let port = try #require(URL(string: api.url)?.port)
            let socket = try await Self.blocking { try Self.connect(port: port, sending: "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") }
            defer { close(socket) }
            let answered = try await Self.blocking { () -> String in
                var buffer = [UInt8](repeating: 0, count: 4096)
                let read = recv(socket, &buffer, buffer.count, 0)
                return String(decoding: buffer.prefix(max(0, read)), as: UTF8.self)
            }
            #expect(answered.hasPrefix("HTTP/1.1 200"))
            let open = try await Self.blocking { try Self.waitUntilClosed([socket], deadline: .now() + 30) }
            #expect(open == 0, "the idle keep-alive connection was closed")

            // A connection in use is not: a request every 250 ms for 5 s, longer than every
            // deadline, each moving them (the connection's timer fires meanwhile and must see
            // that), all answered on the one connection; then idle, it is closed.
            let busy = try await Self.blocking { try Self.connect(port: port, sending: "") }
            defer { close(busy) }
            let answers = try await Self.blocking { () -> Int in
                var answers = 0
                for _ in 0..<20 {
                    let sent = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".withCString { send(busy, $0, strlen($0), 0) }
                    guard sent > 0, Self.readResponse(busy)?.hasPrefix("HTTP/1.1 200") == true else { break }
                    answers += 1
                    usleep(250_000)
                }
                return answers
            }
            #expect(answers == 20, "\(answers) of 20 requests answered on a connection in use for 5 s")
            let busyOpen = try await Self.blocking { try Self.waitUntilClosed([busy], deadline: .now() + 60) }
            if busyOpen != 0 {
                // Twice seen in loaded full runs: say whether the server still serves the
                // connection (its idle deadline never armed) or not (its event loop held up).
                let after = try await Self.blocking { () -> String in
                    var wait = timeval(tv_sec: 5, tv_usec: 0)
                    setsockopt(busy, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
                    let sent = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".withCString { send(busy, $0, strlen($0), 0) }
                    return sent > 0 ? Self.readResponse(busy).map { String($0.prefix(40)) } ?? "no answer" : "not sent"
                }
                Issue.record("the connection, idle for 60 s, was not closed; a request on it then: \(after)")
            }

            // A job nobody runs: waiting on it for 4 s outlasts every deadline, and is answered.
            let transactionId = try #require(try await api.buy("credits.100")["transactionId"] as? String)
            let job = try #require(
                try await api.call(.POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": transactionId]).json[
                    "jobId"]
                    as? String)
            let started = ContinuousClock.now
            let waited = try await api.call(.GET, "/v1/jobs/\(job)?wait=4")
            #expect(waited.status == 200 && waited.json["status"] as? String == "queued")
            #expect(ContinuousClock.now - started >= .seconds(3))
        }
    }

    /// A request whose head declares a body over the limit is refused (413) at once, not
    /// once a body that may never come has been waited for.
    @Test(.timeLimit(.minutes(2))) func aBodyDeclaredTooLargeIsRefusedBeforeItComes() async throws {
        try await APIStack.run("declared-large", configure: { $0.requestTimeout = .seconds(90) }) { api in
            let port = try #require(URL(string: api.url)?.port)
            let head =
                "POST /v1/purchases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(APIStack.demoToken)\r\n"
                + "Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{}"
            let socket = try await Self.blocking { try Self.connect(port: port, sending: head) }
            defer { close(socket) }
            // Within the 90 s request deadline, which would only close the connection.
            let answer = try await Self.blocking { Self.readResponse(socket) }
            #expect(answer?.hasPrefix("HTTP/1.1 413") == true, "\(answer ?? "closed with no answer")")
            #expect(try await api.enqueuedCount() == 0)
        }
    }

    static func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try work() }) }
        }
    }

    static func connect(port: Int, sending text: String) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SpawnError(message: "socket(): \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw SpawnError(message: "connect(): \(String(cString: strerror(errno)))")
        }
        if !text.isEmpty { _ = text.withCString { send(fd, $0, strlen($0), 0) } }
        return fd
    }

    /// Reads one whole response (its head, then as many bytes as its Content-Length says) and
    /// returns its head; nil once the connection is closed.
    static func readResponse(_ socket: Int32) -> String? {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let separator = Array("\r\n\r\n".utf8)
        while true {
            if let end = received.indices.first(where: { received[$0...].starts(with: separator) }) {
                let head = String(decoding: received[..<end], as: UTF8.self)
                let length =
                    head.split(separator: "\r\n").lazy.compactMap { line -> Int? in
                        let parts = line.split(separator: ":", maxSplits: 1)
                        guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                        return Int(parts[1].trimmingCharacters(in: .whitespaces))
                    }.first ?? 0
                if received.count >= end + separator.count + length { return head }
            }
            let read = recv(socket, &buffer, buffer.count, 0)
            guard read > 0 else { return nil }
            received += buffer.prefix(read)
        }
    }

    /// Polls until the server has closed every socket (a read returns end of file) or the
    /// deadline passes; returns how many are still open.
    static func waitUntilClosed(_ sockets: [Int32], deadline: DispatchTime) throws -> Int {
        var open = Set(sockets)
        var buffer = [UInt8](repeating: 0, count: 4096)
        repeat {
            var descriptors = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&descriptors, nfds_t(descriptors.count), DispatchTime.now() < deadline ? 200 : 0)
            for descriptor in descriptors where descriptor.revents != 0 {
                let read = recv(descriptor.fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                // End of file or a reset: closed. (A 408 or 400 written before closing is read first.)
                if read == 0 || (read < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { open.remove(descriptor.fd) }
            }
        } while !open.isEmpty && DispatchTime.now() < deadline
        return open.count
    }
}
