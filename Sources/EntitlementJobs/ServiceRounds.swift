import Logging
import ServiceLifecycle

/// The loop of the worker's periodic services (the renewal sweep, the reconcile schedule,
/// the report folder): a round every `interval` until the process shuts down; a round that
/// fails is logged and the next one goes on.
func everyRound(of interval: Duration, logger: Logger, failure: String, _ round: () async throws -> Void) async {
    while !Task.isShuttingDownGracefully && !Task.isCancelled {
        do {
            try await round()
        } catch {
            logger.warning("\(failure)", metadata: ["error": "\(error)"])
        }
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
    }
}
