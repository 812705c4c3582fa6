import Foundation
import JobQueue
import RedisClient
import RedisTestSupport
import Testing

/// The whole stack (simulator, worker processes, entitlement store, locks) on a 3-primary,
/// 3-replica Redis Cluster while primaries fail over: every customer ends with exactly the
/// credits they bought.
@Suite(.serialized) struct ClusterEndToEndTests {
    @Test(.timeLimit(.minutes(4))) func creditsStayExactWhilePrimariesFailOver() async throws {
        let cluster = try await LocalRedisCluster.start()
        do {
            try await EntitleStack.run("cluster-credits", redisURL: cluster.url + "?replicas=1") { stack in
                try await stack.startWorker()
                try await stack.startWorker()
                var expected: [String: Int] = [:]
                var jobs: [String] = []
                for index in 0..<16 {
                    if index == 5 {
                        // The queue's primary fails over gracefully.
                        let primary = try await cluster.primary(forKey: "{default}")
                        try await cluster.failover(to: try await cluster.replica(of: primary))
                    }
                    if index == 10 {
                        // A primary holding customers dies and comes back as a replica.
                        let victim = try await cluster.primary(forKey: "\(stack.prefix):ent:demo:customer:c1@example.com")
                        await victim.kill()
                        Task { try? await Task.sleep(for: .seconds(4)); try? await victim.restart() }
                    }
                    let customer = "c\(index % 4)@example.com"
                    let bought = try await stack.purchase("credits.100", #""quantity":1"#)
                    let jws = try #require(bought["signedTransaction"] as? String)
                    // An enqueue whose connection broke is sent again; the engine counts a
                    // transaction once, however many jobs carry it.
                    let id = try await retrying {
                        try await stack.enqueue("receipt", ["publisher": "demo", "customer": customer, "signedTransaction": jws])
                    }
                    jobs.append(id)
                    expected[customer, default: 0] += 100
                }
                for id in jobs {
                    let (record, _) = try await retrying { try await stack.finished(id, timeout: .seconds(90)) }
                    #expect(record.status == .succeeded, "receipt job \(id): \(record.lastError ?? "")")
                }
                for (customer, credits) in expected {
                    let state = try await retrying { try await stack.customer(customer) }
                    #expect(state.credits.balance == credits, "\(customer)")
                    #expect(state.credits.entries.count == credits / 100, "\(customer): one entry per purchase")
                }
                try await cluster.waitUntilHealthy(primaries: 3, replicas: 3)
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    /// Runs `body` again when a connection open at a crash broke under it.
    func retrying<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await body()
            } catch let error as RedisError where error.isRetryable && attempt < 5 {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
