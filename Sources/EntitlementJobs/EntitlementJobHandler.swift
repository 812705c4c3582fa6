import AppStore
import EntitleCore
import JobQueue

/// An entitlement job: `run` returns its typed result, which becomes the job's JSON result;
/// errors become `JobFailure`s classed as Apple and Redis class them.
protocol EntitlementJobHandler: JobHandler {
    associatedtype Result: Encodable
    var service: EntitlementService { get }
    /// Whether the job asks the App Store Server API: such jobs wait while Apple asked the
    /// publisher to (`ApplePause`).
    var asksApple: Bool { get }
    func run(_ job: JobContext) async throws -> Result
}

extension EntitlementJobHandler {
    var asksApple: Bool { true }

    package func handle(_ job: JobContext) async throws -> String? {
        // A publisher the catalog has (the payload is not trusted before the handler reads it).
        let publisher = asksApple ? JobPayloads.publisher(in: job.payload).flatMap { try? service.publisher($0).id } : nil
        if let publisher, let wait = try await service.applePause.remaining(publisher) {
            throw JobFailure.deferred("appleRateLimited", "Apple asked publisher \(publisher) to wait (429)", after: wait)
        }
        do {
            return try JobPayloads.encode(try await run(job))
        } catch let error as AppStoreError where error.code == .rateLimited {
            if let publisher { try? await service.applePause.pause(publisher, until: error.retryAfter) }
            throw JobFailure.from(error)
        } catch {
            throw JobFailure.from(error)
        }
    }
}
