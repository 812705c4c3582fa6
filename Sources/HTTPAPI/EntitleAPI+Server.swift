import DurationUnits
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

extension EntitleAPI {
    /// The API's HTTP server, with the limits a public deployment keeps: the header, request
    /// and idle deadlines of `RequestDeadlineHandler`, and at most `maxConnections` connections
    /// served at once (more wait in the kernel's backlog). `onListening` gets the URL once it
    /// accepts connections. `eventLoopGroup`: where its connections run (NIO's shared group
    /// unless given).
    package func makeApplication(
        host: String, port: Int, eventLoopGroup: EventLoopGroupProvider = .singleton,
        onListening: @escaping @Sendable (String) async -> Void = { _ in }
    ) -> Application<RouterResponder<APIRequestContext>> {
        let (header, request, idle) = (
            Self.timeAmount(configuration.headerTimeout), Self.timeAmount(configuration.requestTimeout),
            Self.timeAmount(configuration.idleTimeout)
        )
        let server = HTTPServerBuilder.http1(
            configuration: HTTP1Channel.Configuration(
                additionalChannelHandlers: [RequestDeadlineHandler(header: header, request: request, idle: idle)]))
        var configuration = ApplicationConfiguration(address: .hostname(host, port: port), serverName: "entitle")
        configuration.availableConnectionsDelegate = MaximumAvailableConnections(self.configuration.maxConnections)
        return Application(
            router: makeRouter(), server: server, configuration: configuration,
            onServerRunning: { channel in
                let shown = host.contains(":") ? "[\(host)]" : host
                await onListening("http://\(shown):\(channel.localAddress?.port ?? port)")
            },
            eventLoopGroupProvider: eventLoopGroup, logger: logger)
    }

    /// NIO's spelling of a duration (a day at most: no timeout here is longer).
    static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(min(max(0, duration.nanoseconds), 86_400 * 1_000_000_000))
    }

    /// Raises this process's limit on open files to its hard limit (servers hold one per
    /// connection) and returns the limit now in force.
    @discardableResult
    package static func raiseOpenFileLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }
}
