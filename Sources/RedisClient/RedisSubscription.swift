import DurationUnits
import Logging
import Synchronization

/// A sharded subscription (`SSUBSCRIBE`, Redis 7) to one channel, held on a connection of its
/// own at the server that serves the channel's slot: the one server, the Sentinel primary, or
/// the cluster primary of the slot, so a channel named with a hash tag is served where the
/// keys of that tag live, and a script writing those keys may publish to it.
///
/// Redis keeps no message for a subscriber that is away: after every (re)subscription the
/// stream yields `.subscribed`, and a caller that waits for something looks again at what it
/// waits for. The subscription follows the slot when a failover or a migration moves it (it
/// checks the router's map every quarter second, and pings an idle connection every five
/// seconds to find a dead one), and ends when closed or when its pool is closed.
public final class RedisSubscription: Sendable {
    /// What the stream of a subscription yields.
    public enum Event: Sendable, Hashable {
        /// Subscribed (again): messages published while away were lost.
        case subscribed
        /// One message's payload.
        case message([UInt8])
        /// The server refused to subscribe (no `SSUBSCRIBE` before Redis 7, or an ACL without
        /// the channel): no message will come until it accepts; it is asked again every second.
        case refused(String)
    }

    public let channel: String
    /// Subscribed events and messages, in order; finishes once the subscription is closed.
    public let events: AsyncStream<Event>
    private let task: Task<Void, Never>

    init(router: RedisRouter, channel: String, name: String) {
        self.channel = channel
        let (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
        self.events = events
        self.task = Task {
            await Self.listen(router: router, channel: channel, name: name, continuation: continuation)
            continuation.finish()
        }
    }

    deinit { task.cancel() }

    /// Unsubscribes (closes the connection) and finishes the stream.
    public func close() { task.cancel() }

    private static let idlePoll = Duration.milliseconds(250)
    /// Replies that mean a failover or migration is under way, not a refusal.
    private static let settling = RedisRouter.settling + ["ASK", "MOVED"]
    private static let pingAfter = Duration.seconds(5)
    private static let deadAfter = Duration.seconds(10)

    private static func listen(
        router: RedisRouter, channel: String, name: String, continuation: AsyncStream<Event>.Continuation
    ) async {
        let slot = router.isCluster ? RedisKeySlot.slot(channel) : nil
        let clock = ContinuousClock()
        var failures = 0
        while !Task.isCancelled && !router.isClosed {
            var connection: RedisConnection?
            do {
                let address = try await router.address(forSlot: slot)
                let opened = RedisConnection(configuration: router.nodeConfiguration(address), name: name, logger: router.logger)
                connection = opened
                let confirmation = try await opened.send(["SSUBSCRIBE", channel])
                guard Self.kind(of: confirmation) == "ssubscribe" else {
                    throw RedisError(.unexpectedReply, "SSUBSCRIBE answered \(confirmation)")
                }
                failures = 0
                continuation.yield(.subscribed)
                var heard = clock.now
                var checked = clock.now
                var pinged = false
                listening: while !Task.isCancelled && !router.isClosed {
                    if let reply = try await opened.receive(within: idlePoll) {
                        heard = clock.now
                        pinged = false
                        switch Self.kind(of: reply) {
                        case "smessage":
                            if let elements = reply.array, elements.count == 3, case .bulk(let payload) = elements[2] {
                                continuation.yield(.message(payload))
                            }
                        case "sunsubscribe":
                            // The server let go of the channel: its slot moved elsewhere.
                            await router.refresh()
                            break listening
                        default:
                            break  // pong
                        }
                        if clock.now - checked < idlePoll { continue }
                    }
                    // Has the slot's primary changed (failover, migration)? Asked of the
                    // client's map four times a second, busy or idle.
                    checked = clock.now
                    if try await router.address(forSlot: slot) != address { break listening }
                    let quiet = clock.now - heard
                    if quiet > deadAfter { break listening }
                    if quiet > pingAfter && !pinged {
                        try await opened.write(["PING"])
                        pinged = true
                    }
                }
            } catch {
                failures += 1
                if let redisError = error as? RedisError, redisError.message.hasPrefix("MOVED") || redisError.code != .serverError {
                    router.requestRefresh()
                } else if let redisError = error as? RedisError, !Self.settling.contains(where: redisError.message.hasPrefix) {
                    // Not a failover under way: the server will not have it (an old Redis, an ACL).
                    if failures == 1 || failures % 60 == 0 {
                        router.logger.warning(
                            "the server refuses to subscribe; long-polls read their jobs instead",
                            metadata: ["channel": "\(channel)", "error": "\(redisError.message)"])
                    }
                    continuation.yield(.refused(redisError.message))
                }
                router.logger.debug(
                    "subscription interrupted; subscribing again", metadata: ["channel": "\(channel)", "error": "\(error)"])
            }
            await connection?.disconnect()
            if failures > 0 {
                let pause = Duration.milliseconds(min(1000, 20 << min(failures - 1, 6)))
                try? await Task.sleep(for: pause)
            }
        }
    }

    /// The first element of a push (`smessage`, `ssubscribe`, `sunsubscribe`, `pong`).
    private static func kind(of reply: RedisReply) -> String? {
        reply.array?.first?.string?.lowercased()
    }
}

extension RedisConnectionPool {
    /// Subscribes to a sharded channel on a connection of its own (see `RedisSubscription`).
    /// - Parameter name: the connection's name (`CLIENT SETNAME`).
    public func subscribe(channel: String, name: String) -> RedisSubscription {
        RedisSubscription(router: router, channel: channel, name: name)
    }
}
