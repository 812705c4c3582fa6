import EntitlementJobs
import Foundation
import JobQueue
import Synchronization
import Testing

/// A transfer job stopped after it changed the purchase's owner runs again and finishes the
/// move, whether or not the request named whom to move it from: the previous holder never
/// keeps the purchase beside the new one, and nothing is written twice.
@Suite struct TransferRerunTests {
    /// How often the armed step was reached.
    final class Stops: Sendable {
        let reached = Atomic(0)
    }

    /// Runs `body` with a stack whose worker stops the first transfer job at `step` (its
    /// attempt deferred, as a crash's rerun would come).
    func withStop(
        _ name: String, at step: TransferJobHandler.Step, _ body: @Sendable (APIStack, Stops) async throws -> Void
    )
        async throws
    {
        let stops = Stops()
        try await APIStack.run(
            name, worker: true,
            service: { service in
                service.duringTransfer = { _, reached in
                    guard reached == step else { return }
                    if stops.reached.add(1, ordering: .relaxed).newValue == 1 {
                        throw JobFailure.deferred("testStop", "stopped by the test", after: .milliseconds(10))
                    }
                }
            }
        ) { api in try await body(api, stops) }
    }

    func check(_ step: TransferJobHandler.Step, _ name: String) async throws {
        try await withStop(name, at: step) { api, stops in
            let (ann, bob) = ("ann-\(name)@example.com", "bob-\(name)@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            // No `from`: the job reads whom to move it from.
            let moved = try await api.transfer(original, to: bob, from: nil)

            #expect(stops.reached.load(ordering: .relaxed) > 0, "the job was stopped part way")
            #expect(moved["previousOwner"] as? String == ann && moved["newOwner"] as? String == bob, "\(moved)")
            #expect(try await api.access(bob, "premium"))
            #expect(try await !api.access(ann, "premium"), "the previous holder was released")
            let transfers = try await api.events(bob).filter { $0["type"] as? String == "transfer" }
            #expect(transfers.count == 1, "\(transfers)")
        }
    }

    @Test(.timeLimit(.minutes(3))) func aTransferStoppedAfterItsOwnerChangeReleasesThePreviousHolderOnItsRerun() async throws {
        try await check(.ownerChanged, "rerun-owner")
    }

    @Test(.timeLimit(.minutes(3))) func aTransferStoppedAfterItsReleaseEndsWellOnItsRerun() async throws {
        try await check(.released, "rerun-released")
    }
}
