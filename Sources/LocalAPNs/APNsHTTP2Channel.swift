import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import NIOSSL

/// The server's connections: TLS, ALPN `h2` only (APNs speaks nothing else), then HTTP/2 with
/// one Hummingbird request per stream. HummingbirdHTTP2's `http2Upgrade` does the same but keeps
/// NIO's default of 100 concurrent streams per connection (Hummingbird 2.28 has no setting for it),
/// and a provider pushing at APNs' pace keeps many more streams open on one connection.
struct APNsHTTP2Channel: HTTPChannelHandler {
    typealias Stream = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>
    typealias Negotiated = NIONegotiatedHTTPVersion<Void, NIOHTTP2Handler.AsyncStreamMultiplexer<Stream>>

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let responder: Responder
    let sslContext: NIOSSLContext
    let http2Configuration: NIOHTTP2Handler.Configuration
    /// Told when a connection has ended and its streams are done.
    let onConnectionClosed: @Sendable (ObjectIdentifier) async -> Void

    init(
        responder: @escaping Responder, sslContext: NIOSSLContext, maxConcurrentStreams: Int,
        onConnectionClosed: @escaping @Sendable (ObjectIdentifier) async -> Void
    ) {
        self.responder = responder
        self.sslContext = sslContext
        self.onConnectionClosed = onConnectionClosed
        var configuration = NIOHTTP2Handler.Configuration()
        configuration.connection.initialSettings = nioDefaultSettings.map { setting in
            setting.parameter == .maxConcurrentStreams
                ? HTTP2Setting(parameter: .maxConcurrentStreams, value: maxConcurrentStreams) : setting
        }
        // Many streams each sending a payload would stall on HTTP/2's 64 KiB connection window.
        configuration.connection.targetWindowSize = 4 << 20
        http2Configuration = configuration
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        do {
            try channel.pipeline.syncOperations.addHandler(CloseOnQuiesceHandler())
            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        let configuration = http2Configuration
        return channel.configureHTTP2AsyncSecureUpgrade { channel in
            // HTTP/1.1 was asked for, or nothing: `handle` closes the connection.
            channel.eventLoop.makeSucceededVoidFuture()
        } http2ConnectionInitializer: { channel in
            channel.configureAsyncHTTP2Pipeline(mode: .server, configuration: configuration) { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
                    return try Stream(wrappingChannelSynchronously: stream)
                }
            }
        }
        .map { Value(negotiated: $0, channel: channel) }
    }

    func handle(value: Value, logger: Logger) async {
        await withTaskCancellationHandler {
            do {
                switch try await value.negotiated.get() {
                case .http1_1:
                    logger.debug("closing a connection that did not negotiate HTTP/2")
                case .http2(let multiplexer):
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await stream in multiplexer.inbound {
                            group.addTask { await handleHTTP(asyncChannel: stream, logger: logger) }
                        }
                    }
                }
            } catch {
                logger.trace("connection ended", metadata: ["error": "\(error)"])
            }
        } onCancel: {
            value.channel.close(promise: nil)
        }
        try? await value.channel.close()
        await onConnectionClosed(ObjectIdentifier(value.channel))
    }
}

/// Closes a connection when the server shuts down gracefully (Hummingbird tells each connection
/// to quiesce, then waits for all of them to close).
private final class CloseOnQuiesceHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}
