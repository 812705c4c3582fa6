import NIOCore
import NIOHTTPTypes

/// The three deadlines of a connection, so a client that connects and waits, trickles its
/// request, or holds a keep-alive connection open cannot hold the server:
///
/// - **header**: from connecting until the first request's head has arrived whole;
/// - **request**: from a request's head until the end of its body;
/// - **idle**: after a response, until the next request's head has arrived.
///
/// While a request is being answered (a long poll) no deadline runs. A deadline that passes
/// closes the connection.
final class RequestDeadlineHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let header: TimeAmount
    let request: TimeAmount
    let idle: TimeAmount
    private var deadline: Scheduled<Void>?
    /// Requests whose head arrived and whose response has not been written whole.
    private var unanswered = 0
    /// A request's head arrived and its body has not ended: the request deadline runs, even
    /// once it is answered (a refusal written before the body was read).
    private var reading = false

    init(header: TimeAmount, request: TimeAmount, idle: TimeAmount) {
        self.header = header
        self.request = request
        self.idle = idle
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context, header) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context, header)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            unanswered += 1
            reading = true
            arm(context, request)
        case .end:
            reading = false
            // Answered already (a refusal before the body was read): the idle deadline runs.
            if unanswered == 0 { arm(context, idle) } else { disarm() }
        case .body:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            unanswered = max(0, unanswered - 1)
            if unanswered == 0 && !reading { arm(context, idle) }
        }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        disarm()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { disarm() }

    private func arm(_ context: ChannelHandlerContext, _ timeout: TimeAmount) {
        deadline?.cancel()
        let channel = context.channel
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { channel.close(promise: nil) }
    }

    private func disarm() {
        deadline?.cancel()
        deadline = nil
    }
}
