import EntitleCore
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

    @Test(.timeLimit(.minutes(3))) func aTransferAnAppsClaimAskedForThatAnotherMadeFirstEndsWellMovingNothing() async throws {
        try await APIStack.run("transfer-made-first", worker: true) { api in
            let (ann, bob) = ("ann-first@example.com", "bob-first@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            let moved = try await api.transfer(original, to: bob, from: ann)
            let since = try #require(moved["transferredAt"].map { "\($0)" })

            // The second of two claims of bob's asked for the same move: its job finds it made.
            let asked = JobPayloads.Transfer(publisher: "demo", originalTransactionId: original, to: bob, from: ann, road: .appKey)
            let id = try await api.jobQueue.enqueue(try EnqueueRequest(asked, queue: "default")).id
            let again = try await api.result(id)
            #expect(again["movedBefore"] as? Bool == true && again["newOwner"] as? String == bob, "\(again)")
            #expect(again["transferredAt"].map { "\($0)" } == since, "when bob's holding began: \(again)")
            let transfers = try await api.events(bob).filter { $0["type"] as? String == "transfer" }
            #expect(transfers.count == 1, "\(transfers)")
            #expect(try await api.access(bob, "premium"))
            #expect(try await !api.access(ann, "premium"))
        }
    }

    /// A job held before its rerun, until the test lets it go.
    final class Hold: Sendable {
        let job = Mutex<String?>(nil)
        let (stopped, stop) = AsyncStream<Void>.makeStream()
        let (released, release) = AsyncStream<Void>.makeStream()
    }

    /// Stopped once it applied the purchase to bob (the owner still ann), or once bob owned it
    /// (ann not released yet); then another job moves the purchase on to cid.
    /// Stopped before it applied anything: its rerun moves the purchase from its owner now
    /// (cid), at a moment of its own.
    @Test(.timeLimit(.minutes(3))) func aTransferStoppedBeforeItAppliedAnythingMovesThePurchaseFromItsOwnerNow() async throws {
        try await stoppedWhileAnotherMovesOn(at: .kept) { api, rerun, ann, bob, cid async throws in
            #expect(rerun["status"] as? String == "succeeded", "\(rerun)")
            let result = rerun["result"] as? [String: Any]
            #expect(result?["previousOwner"] as? String == cid && result?["newOwner"] as? String == bob, "\(rerun)")
            #expect(try await api.access(bob, "premium"))
            #expect(try await !api.access(cid, "premium"))
            #expect(try await !api.access(ann, "premium"))
        }
    }

    @Test(.timeLimit(.minutes(3)), arguments: [TransferJobHandler.Step.applied, .ownerChanged])
    func aTransferStoppedPartWayThatAnotherMovedOnReleasesWhomItTouchedAndMovesNothing(
        at stop: TransferJobHandler.Step
    )
        async throws
    {
        try await stoppedWhileAnotherMovesOn(at: stop) { api, rerun, ann, bob, cid async throws in
            #expect(rerun["status"] as? String == "failed" && "\(rerun)".contains("movedOn"), "\(rerun)")
            #expect(try await api.access(cid, "premium"), "the move made meanwhile stands")
            #expect(try await !api.access(ann, "premium"), "whom the stopped job moved it from was released")
            #expect(try await !api.access(bob, "premium"), "nor does the customer the stopped job moved it to")
        }
    }

    /// Stopped once bob owned it; meanwhile the purchase comes back to ann: she keeps it.
    @Test(.timeLimit(.minutes(3))) func aTransferStoppedAfterItsOwnerChangeWhosePurchaseCameBackLeavesItWhereItIs() async throws {
        try await stoppedWhileAnotherMovesOn(at: .ownerChanged, back: true) { api, rerun, ann, bob, _ async throws in
            #expect(rerun["status"] as? String == "failed" && "\(rerun)".contains("movedOn"), "\(rerun)")
            #expect(try await api.access(ann, "premium"), "the purchase came back to ann and stays hers")
            #expect(try await !api.access(bob, "premium"))
        }
    }

    /// ann's purchase asked to move to bob (no `from`), the job stopped at `stop`; meanwhile
    /// another job moves it on to cid (`back`: to ann); then the stopped job runs again: its
    /// document.
    func stoppedWhileAnotherMovesOn(
        at stop: TransferJobHandler.Step, back: Bool = false,
        _ check: @Sendable (APIStack, [String: Any], String, String, String) async throws -> Void
    ) async throws {
        let hold = Hold()
        try await APIStack.run(
            "transfer-moved-on-\(stop)", worker: true,
            service: { service in
                service.duringTransfer = { job, step in
                    guard step == stop else { return }
                    let first = hold.job.withLock { held in
                        guard held == nil else { return false }
                        held = job.id
                        return true
                    }
                    guard first else { return }
                    hold.stop.yield()
                    throw JobFailure.deferred("testStop", "stopped by the test", after: .milliseconds(10))
                }
                service.beforeTakingLocks = { job, _ in
                    guard hold.job.withLock({ $0 == job.id }) else { return }
                    for await _ in hold.released { break }
                }
            }
        ) { api in
            let (ann, bob, cid) = ("ann-on@example.com", "bob-on@example.com", "cid-on@example.com")
            let bought = try await api.buy("premium.monthly", extra: ["environment": "Production"])
            let original = try #require(bought["originalTransactionId"] as? String)
            _ = try await api.claim(["customer": ann, "signedTransaction": try #require(bought["signedTransaction"] as? String)])
            // ann to bob, no `from`: stopped at `stop`.
            let reply = try await api.call(
                .POST, "/v1/transfers", json: ["originalTransactionId": original, "to": bob], route: "POST /v1/transfers")
            try #require(reply.status == 202, "\(reply.text)")
            let stopped = try #require(reply.json["jobId"] as? String)
            for await _ in hold.stopped { break }
            // Meanwhile another job moves the purchase on to cid. The API refuses a request about
            // the purchase while the stopped job is unfinished; an import's claim or a producer
            // of its own does not ask it.
            let move = JobPayloads.Transfer(publisher: "demo", originalTransactionId: original, to: back ? ann : cid)
            let onward = try await api.result(try await api.jobQueue.enqueue(try EnqueueRequest(move, queue: "default")).id)
            #expect(onward["newOwner"] as? String == (back ? ann : cid), "\(onward)")
            hold.release.yield()
            hold.release.finish()

            try await check(api, try await api.finished(stopped), ann, bob, cid)
        }
    }
}
