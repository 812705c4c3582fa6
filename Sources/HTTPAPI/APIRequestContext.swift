import Hummingbird
import NIOCore

/// The request context of the API's routes: Hummingbird's core context and the address the
/// request came from (the limiter for failed authentications is keyed by it).
package struct APIRequestContext: RequestContext, RemoteAddressRequestContext {
    package var coreContext: CoreRequestContextStorage
    package let remoteAddress: SocketAddress?

    package init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = source.channel.remoteAddress
    }

    /// The client's IP address as text ("unknown" when the channel has none).
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }
}
