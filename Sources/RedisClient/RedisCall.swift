/// One call of a mixed pipeline (`RedisConnectionPool.execute`): a command, or a script run by
/// EVALSHA (EVAL when the server has not cached it).
public enum RedisCall: Sendable {
    case command([String])
    case script(RedisScript, keys: [String], arguments: [String])
    /// A script sent by EVAL, its whole source: it runs in its place in the pipeline even on
    /// a server that lost its scripts, where EVALSHA's NOSCRIPT is answered by sending it
    /// again after the calls that follow it. For a script that later calls must follow.
    case scriptInPlace(RedisScript, keys: [String], arguments: [String])
}

extension RedisConnectionPool {
    /// Runs commands and scripts in one round trip per server involved (on a cluster, the
    /// servers' parts are sent at once, so calls to different servers run in no set order);
    /// each result is its reply or its error. A broken connection throws (some calls may
    /// have run).
    public func execute(_ calls: [RedisCall]) async throws -> [Result<RedisReply, RedisError>] {
        let routed = try calls.map { call -> RoutedCommand in
            switch call {
            case .command(let command):
                return RoutedCommand(command: command, slot: router.isCluster ? try RedisCommandKeys.slot(command) : nil)
            case .script(let script, let keys, let arguments):
                return RoutedCommand(
                    command: script.command(keys: keys, arguments: arguments), slot: try RedisRouter.slot(of: script, keys), script: script)
            case .scriptInPlace(let script, let keys, let arguments):
                return RoutedCommand(
                    command: script.command(keys: keys, arguments: arguments, bySource: true), slot: try RedisRouter.slot(of: script, keys))
            }
        }
        let replies = try await router.execute(routed, timeout: nil, through: self)
        return zip(calls, replies).map { call, reply in
            guard case .error(let message) = reply else { return .success(reply) }
            switch call {
            case .script(let script, _, _), .scriptInPlace(let script, _, _):
                return .failure(RedisError.script(script, replied: message))
            case .command: return .failure(RedisError(.serverError, message))
            }
        }
    }
}
