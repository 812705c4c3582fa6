import NIOCore
import NIOHTTPTypes

/// Closes a connection whose request has not arrived whole (from its head to the end of its
/// body) within `timeout`: a client that trickles its body cannot hold a connection for
/// ever. How long a request head may take is the server's idle timeout.
final class RequestDeadlineHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart

    let timeout: TimeAmount
    private var deadline: Scheduled<Void>?

    init(timeout: TimeAmount) { self.timeout = timeout }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            deadline?.cancel()
            let channel = context.channel
            deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { channel.close(promise: nil) }
        case .end:
            deadline?.cancel()
            deadline = nil
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }
}
