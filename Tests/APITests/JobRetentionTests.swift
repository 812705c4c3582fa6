import EntitleCore
import Foundation
import JobQueue
import RedisTestSupport
import Testing

/// What a purchase leaves in Redis: a finished job keeps what is read (status, result, times,
/// who it is for), not its input; a dead job keeps its payload to be retried; no app receipt
/// is kept for a purchase whose renewals Apple's statuses answer.
@Suite struct JobRetentionTests {
    @Test func finishedJobsKeepTheirAnswerNotTheirInputAndDeadOnesKeepTheirPayload() async throws {
        try await APIStack.run("retention", worker: true, notify: ["demo"]) { api in
            // An app posts a purchase with its app key; Apple's notifications follow.
            let bought = try await api.buy("premium.monthly")
            let ann = customerToken("ann@example.com")
            let posted = try await api.call(
                .POST, "/v1/purchases", token: APIStack.appKey, headers: ["X-Customer-Token": ann],
                json: ["signedTransaction": try #require(bought["signedTransaction"] as? String)], route: "POST /v1/purchases")
            try #require(posted.status == 202, "\(posted.text)")
            let jobId = try #require(posted.json["jobId"] as? String)
            let answer = try await api.result(jobId, token: APIStack.appKey, headers: ["X-Customer-Token": ann])
            #expect(answer["accessGranted"] as? Bool == true)
            try await api.settle()

            let record = try #require(try await api.jobQueue.job(id: jobId, queue: "default"))
            #expect(record.status == .succeeded)
            #expect(record.payload.isEmpty, "the signed transaction is not kept once the job succeeded")
            #expect(record.result?.contains("accessGranted") == true)
            let owner = JobPayloads.owner(label: record.label, payload: record.payload)
            #expect(owner == JobPayloads.Owner(publisher: "demo", appKey: "ios", customer: "ann@example.com"))
            // The app still reads its answer by id; another customer's token still cannot.
            let read = try await api.call(
                .GET, "/v1/jobs/\(jobId)", token: APIStack.appKey, headers: ["X-Customer-Token": ann], route: "GET /v1/jobs/{id}")
            #expect(read.status == 200 && (read.json["result"] as? [String: Any])?["accessGranted"] as? Bool == true)
            let bob = try await api.call(
                .GET, "/v1/jobs/\(jobId)", token: APIStack.appKey, headers: ["X-Customer-Token": customerToken("bob@example.com")],
                route: "GET /v1/jobs/{id}")
            #expect(bob.status == 404)
            #expect(try await api.call(.GET, "/v1/jobs/\(jobId)", token: APIStack.otherToken, route: "GET /v1/jobs/{id}").status == 404)
            #expect(try await api.call(.GET, "/v1/jobs/\(jobId)", route: "GET /v1/jobs/{id}").status == 200)

            // Apple's notifications were applied and their jobs keep no signed payload.
            let keys = api.jobQueue.configuration.keys("default")
            var notifications = 0
            for key in try await api.jobQueue.redis.send(["KEYS", keys.job("*")]).array?.compactMap(\.string) ?? [] {
                let fields = try await api.jobQueue.redis.send(["HGETALL", key]).fieldValues
                guard fields["type"] == "notification", fields["status"] == "succeeded" else { continue }
                notifications += 1
                #expect(fields["payload"] == nil, "a finished notification job keeps no signedPayload")
                // Its id names the notification (Apple's retries find it): no idempotency key, no digest.
                #expect(key.contains(":job:notification:") && fields["digest"] == nil && fields["idempotencyKey"] == nil, "\(key)")
            }
            #expect(notifications >= 1)
            // A replayed notification is still a no-op: its marker says applied.
            let sent = try await api.simulatorJSON("/simulator/notifications") as? [[String: Any]] ?? []
            let uuid = try #require(sent.compactMap { $0["notificationUUID"] as? String }.first)
            _ = try await api.simulator("/simulator/notifications/\(uuid)/resend", "{}")
            try await api.settle()
            #expect(try await api.customer("ann@example.com")["entitlements"] as? [String] == ["hd", "premium"])

            // A signed-transaction purchase of an app with an App Store Server API key: no receipt kept.
            let receipts = try await api.jobQueue.redis.send(["KEYS", api.jobQueue.configuration.prefix + ":ent:*:receipt:*"]).array ?? []
            #expect(receipts.isEmpty)

            // A job that can never succeed goes dead with its payload, to be retried.
            let dead = try await api.jobQueue.enqueue(
                EnqueueRequest(type: "notification", payload: #"{"publisher":"demo","signedPayload":"not a JWS"}"#, queue: "default"))
            try await eventually("the bad job to die") { try await api.jobQueue.job(id: dead.id, queue: "default")?.status == .failed }
            #expect(try await api.jobQueue.job(id: dead.id, queue: "default")?.payload.contains("not a JWS") == true)
        }
    }

    @Test func anIdempotencyKeyReusedWithAnotherPayloadIsRefusedAfterTheFirstJobSucceeded() async throws {
        try await APIStack.run("retention-repeat", worker: true) { api in
            var first = EnqueueRequest(type: "noop", payload: #"{"n":1}"#, queue: "default", idempotencyKey: "once")
            first.repeatMustMatch = true
            let made = try await api.jobQueue.enqueue(first)
            try await eventually("the first to succeed") { try await api.jobQueue.job(id: made.id, queue: "default")?.status == .succeeded }
            #expect(try await api.jobQueue.job(id: made.id, queue: "default")?.payload.isEmpty == true)
            #expect(try await api.jobQueue.enqueue(first).outcome == .existing)
            var other = first
            other.payload = #"{"n":2}"#
            #expect(try await api.jobQueue.enqueue(other).outcome == .mismatch)
        }
    }
}
