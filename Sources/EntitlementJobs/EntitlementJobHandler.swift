import EntitleCore
import JobQueue

/// An entitlement job: `run` returns its typed result, which becomes the job's JSON result;
/// errors become `JobFailure`s classed as Apple and Redis class them.
protocol EntitlementJobHandler: JobHandler {
    associatedtype Result: Encodable
    func run(_ job: JobContext) async throws -> Result
}

extension EntitlementJobHandler {
    package func handle(_ job: JobContext) async throws -> String? {
        do {
            return try JobPayloads.encode(try await run(job))
        } catch {
            throw JobFailure.from(error)
        }
    }
}
