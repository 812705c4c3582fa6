import Hummingbird

/// Hummingbird's request context plus the HTTP/2 connection a request's stream belongs to.
struct APNsRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The stream channel's parent: one per HTTP/2 connection, alive while the connection is.
    let connection: ObjectIdentifier?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        connection = source.channel.parent.map { ObjectIdentifier($0) }
    }
}
