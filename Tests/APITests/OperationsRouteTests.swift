import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// Transfers, queues, metrics, health, and the dashboard's operator routes.
@Suite struct OperationsRouteTests {
    @Test func transfersQueuesHealthAndMetrics() async throws {
        try await APIStack.run("ops") { api in
            let transfer = try await api.call(
                .POST, "/v1/transfers",
                json: ["originalTransactionId": "2000000000000001", "to": "bob@example.com", "from": "ann@example.com"],
                route: "POST /v1/transfers")
            #expect(transfer.status == 202)
            let jobId = try #require(transfer.json["jobId"] as? String)
            let record = try #require(try await api.jobQueue.job(id: jobId, queue: "default"))
            #expect(record.type == "transfer")
            let payload = try JSONSerialization.jsonObject(with: Data(record.payload.utf8)) as? [String: String]
            #expect(
                payload == [
                    "publisher": "demo", "originalTransactionId": "2000000000000001", "to": "bob@example.com", "from": "ann@example.com",
                ])
            // The exact repeat while it runs is the same job; another request about the transaction waits its turn.
            let same = try await api.call(
                .POST, "/v1/transfers",
                json: ["originalTransactionId": "2000000000000001", "to": "bob@example.com", "from": "ann@example.com"],
                route: "POST /v1/transfers")
            #expect(same.status == 202 && same.json["jobId"] as? String == jobId)
            let again = try await api.call(
                .POST, "/v1/transfers", json: ["originalTransactionId": "2000000000000001", "to": "carol@example.com"],
                route: "POST /v1/transfers")
            #expect(again.status == 409 && again.headers["location"] == "/v1/jobs/\(jobId)")
            #expect(
                try await api.call(
                    .POST, "/v1/transfers", json: ["originalTransactionId": "x", "to": "bob@example.com"], route: "POST /v1/transfers"
                ).status == 400)
            #expect(
                try await api.call(.POST, "/v1/transfers", json: ["originalTransactionId": "1", "to": "bob"], route: "POST /v1/transfers")
                    .status == 400)

            // Every tenant's counters: operators only.
            let queues = try await api.call(.GET, "/v1/queues", token: APIStack.adminToken, route: "GET /v1/queues")
            let list = try #require(queues.json["queues"] as? [[String: Any]])
            let queue = try #require(list.first { $0["name"] as? String == "default" })
            #expect(queue["pending"] as? Int == 1 && (queue["counters"] as? [String: Int])?["enqueued:transfer"] == 1)
            #expect(try await api.call(.GET, "/v1/queues", route: "GET /v1/queues").status == 403, "a publisher's key is not an operator's")
            #expect(try await api.call(.GET, "/v1/queues", token: nil, route: "GET /v1/queues").status == 401)

            #expect(try await api.call(.GET, "/healthz", token: nil, route: "GET /healthz").json["status"] as? String == "ok")
            #expect(try await api.call(.GET, "/readyz", token: nil, route: "GET /readyz").json["status"] as? String == "ready")
            let metrics = try await api.call(.GET, "/metrics", token: APIStack.adminToken, route: "GET /metrics")
            #expect(metrics.status == 200 && metrics.text.contains("entitle_test_metric 1"))
            #expect(try await api.call(.GET, "/metrics", token: nil, route: "GET /metrics").status == 401)
            #expect(try await api.call(.GET, "/metrics", route: "GET /metrics").status == 403)
            let unknown = try await api.call(.GET, "/v1/nothing-here", token: nil)
            #expect(unknown.status == 404)
        }
    }

    @Test func deadJobsAreListedRetriedAndPurgedByOperatorsOnly() async throws {
        try await APIStack.run("admin", worker: true) { api in
            // Two jobs that fail for good, and one that succeeds.
            let dead = try await api.jobQueue.enqueue(batch: [
                EnqueueRequest(type: "noop", payload: #"{"failTimes":9}"#, maxAttempts: 1),
                EnqueueRequest(type: "noop", payload: #"{"failTimes":9}"#, maxAttempts: 1),
                EnqueueRequest(type: "noop", payload: "{}"),
            ]).map(\.id)
            try await eventually("two dead jobs") { try await api.jobQueue.stats(queue: "default").dead == 2 }

            let route = "GET /v1/admin/queues/{queue}/dead"
            #expect(
                try await api.call(.GET, "/v1/admin/queues/default/dead", route: route).status == 403,
                "a publisher token is not an operator's")
            let listed = try await api.call(.GET, "/v1/admin/queues/default/dead", token: APIStack.adminToken, route: route)
            #expect(Set((listed.json["jobs"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }) == Set(dead[0..<2]))
            let recent = try await api.call(
                .GET, "/v1/admin/queues/default/recent?limit=10", token: APIStack.adminToken, route: "GET /v1/admin/queues/{queue}/recent")
            #expect((recent.json["jobs"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String } == dead.reversed())

            let retried = try await api.call(
                .POST, "/v1/admin/queues/default/dead/retry", token: APIStack.adminToken, json: ["ids": [dead[0]]],
                route: "POST /v1/admin/queues/{queue}/dead/retry")
            #expect(retried.json["retried"] as? Int == 1)
            try await eventually("the retried job to die again") {
                let status = try await api.jobQueue.job(id: dead[0], queue: "default")?.status
                let count = try await api.jobQueue.stats(queue: "default").dead
                return status == .failed && count == 2
            }
            let bad = try await api.call(
                .POST, "/v1/admin/queues/default/dead/purge", token: APIStack.adminToken, json: ["ids": "all"],
                route: "POST /v1/admin/queues/{queue}/dead/purge")
            #expect(bad.status == 400)
            let purged = try await api.call(
                .POST, "/v1/admin/queues/default/dead/purge", token: APIStack.adminToken, json: [String: Any](),
                route: "POST /v1/admin/queues/{queue}/dead/purge")
            #expect(purged.json["purged"] as? Int == 2)
            #expect(try await api.jobQueue.stats(queue: "default").dead == 0)

            let lookup = "GET /v1/admin/publishers/{publisherId}/customers/{id}"
            #expect(
                try await api.call(
                    .GET, "/v1/admin/publishers/demo/customers/nobody@example.com", token: APIStack.adminToken, route: lookup
                ).status == 404)
            #expect(
                try await api.call(.GET, "/v1/admin/publishers/acme/customers/x", token: APIStack.adminToken, route: lookup).status == 404)
        }
    }

    @Test func withRedisDownTheAPIIsNotReadyAndEnqueuesAre500() async throws {
        try await APIStack.run("redis-down", redisDown: true) { api in
            #expect(try await api.call(.GET, "/healthz", token: nil, route: "GET /healthz").status == 200, "the process itself is alive")
            let ready = try await api.call(.GET, "/readyz", token: nil, route: "GET /readyz")
            #expect(ready.status == 503 && ready.json["status"] as? String == "unavailable")
            // A real fault, not the client's: 500, and the client may retry the same request.
            let purchase = try await api.call(
                .POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": "1"], route: "POST /v1/purchases")
            #expect(purchase.status == 500 && purchase.json["error"] as? String == "internal", "\(purchase.text)")
            // Cleeng's read calls keep Cleeng's contract: 500 with a message.
            let tags = try await api.call(
                .GET, "/cleeng/accessible-tags/ann@example.com", token: nil, headers: CompatibilityRouteTests.cleengHeaders,
                route: "GET /cleeng/accessible-tags/{customerEmail}")
            #expect(tags.status == 500 && !tags.message.isEmpty, "\(tags.text)")
            // Bad input is still the client's mistake, told before Redis is needed.
            #expect(try await api.call(.POST, "/v1/purchases", json: ["customer": "ann"]).status == 400)
        }
    }

    @Test func operatorRoutesAreOffWithoutAnAdminToken() async throws {
        try await APIStack.run("no-admin", adminToken: nil) { api in
            let reply = try await api.call(
                .GET, "/v1/admin/queues/default/dead", token: "anything", route: "GET /v1/admin/queues/{queue}/dead")
            #expect(reply.status == 403 && reply.message.contains("ENTITLE_ADMIN_TOKEN"))
        }
    }
}
