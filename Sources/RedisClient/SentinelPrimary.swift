import Logging

/// Finding a Sentinel-managed primary: ask the sentinels for its address, confirm with
/// `ROLE` that the server there is a primary (during a failover a sentinel may still name
/// the old one), and listen for `+switch-master`.
enum SentinelPrimary {
    typealias Address = RedisConfiguration.Address

    /// The first confirmed primary any sentinel names, or `nil`.
    static func find(
        _ name: String, sentinels: [Address], template: RedisConfiguration, logger: Logger
    ) async -> Address? {
        for sentinel in sentinels {
            let asked = RedisConnection(configuration: configuration(template, sentinel), name: "sentinel", logger: logger)
            let reply = try? await asked.send(["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])
            await asked.disconnect()
            guard let parts = reply?.array, parts.count == 2, let host = parts[0].string, let port = parts[1].int else {
                logger.debug("a sentinel named no primary", metadata: ["sentinel": "\(sentinel)", "name": "\(name)"])
                continue
            }
            let address = Address(host: host, port: port)
            let node = RedisConnection(configuration: template.node(address), name: "role-check", logger: logger)
            let role = try? await node.send(["ROLE"]).array?.first?.string
            await node.disconnect()
            if role == "master" { return address }
            logger.debug("the named primary is not one (yet)", metadata: ["address": "\(address)", "role": "\(role ?? "unreachable")"])
        }
        return nil
    }

    /// Subscribes to `+switch-master` on one sentinel after another and reports each switch
    /// of `name` to `onSwitch` until the task is cancelled or `onSwitch` returns `false`.
    static func watch(
        _ name: String, sentinels: [Address], template: RedisConfiguration, logger: Logger,
        onSwitch: @Sendable (Address) -> Bool
    ) async {
        guard !sentinels.isEmpty else { return }
        var index = 0
        while !Task.isCancelled {
            let sentinel = sentinels[index % sentinels.count]
            let connection = RedisConnection(configuration: configuration(template, sentinel), name: "sentinel-watch", logger: logger)
            do {
                _ = try await connection.send(["SUBSCRIBE", "+switch-master"])
                while !Task.isCancelled {
                    // A quiet channel times out: resubscribe to the same sentinel.
                    // `nil` is also an interrupted wait or half a message: read on until 10 s are up.
                    let quietUntil = ContinuousClock.now + .seconds(10)
                    var received: RedisReply?
                    while received == nil, ContinuousClock.now < quietUntil, !Task.isCancelled {
                        received = try await connection.receive(within: quietUntil - ContinuousClock.now)
                    }
                    guard let message = received else { throw RedisError(.timeout, "no message within 10 s") }
                    // ["message", "+switch-master", "NAME OLDHOST OLDPORT NEWHOST NEWPORT"]
                    guard let parts = message.array, parts.count == 3, let text = parts[2].string else { continue }
                    let fields = text.split(separator: " ").map(String.init)
                    guard fields.count == 5, fields[0] == name, let port = Int(fields[4]) else { continue }
                    logger.notice("sentinel reports a new primary", metadata: ["name": "\(name)", "address": "\(fields[3]):\(port)"])
                    if !onSwitch(Address(host: fields[3], port: port)) {
                        await connection.disconnect()
                        return
                    }
                }
            } catch let error as RedisError where error.code == .timeout {
                await connection.disconnect()
                continue
            } catch {
                logger.debug("sentinel subscription failed", metadata: ["sentinel": "\(sentinel)", "error": "\(error)"])
                index += 1
                try? await Task.sleep(for: .milliseconds(500))
            }
            await connection.disconnect()
        }
    }

    /// Sentinels are asked without the data nodes' credentials and database.
    private static func configuration(_ template: RedisConfiguration, _ sentinel: Address) -> RedisConfiguration {
        var configuration = template.node(sentinel)
        configuration.username = nil
        configuration.password = nil
        configuration.database = 0
        configuration.reconnectTimeout = .zero
        return configuration
    }
}
