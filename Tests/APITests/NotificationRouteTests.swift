import AppStore
import Foundation
import RedisTestSupport
import Testing

/// `POST /v1/notifications/apple/{publisherId}` with what the simulator sends as Apple.
@Suite struct NotificationRouteTests {
    @Test func v2AndV1NotificationsAreQueuedOnceAndRunByTheWorker() async throws {
        try await APIStack.run("notify", worker: true) { api in
            _ = try await api.buy("premium.monthly")
            let v2 = try #require(await api.inbox.wait(for: "/v2", count: 1).first)
            let body = String(decoding: v2.body, as: UTF8.self)
            let route = "POST /v1/notifications/apple/{publisherId}"
            let first = try await api.call(.POST, "/v1/notifications/apple/demo", token: nil, body: body, route: route)
            #expect(first.status == 200)
            let jobId = try #require(first.json["jobId"] as? String)
            // Apple's retry of the same notification finds the same job.
            #expect(
                try await api.call(.POST, "/v1/notifications/apple/demo", token: nil, body: body, route: route).json["jobId"] as? String
                    == jobId)
            let job = try await api.call(.GET, "/v1/jobs/\(jobId)?wait=20", route: "GET /v1/jobs/{id}")
            #expect(job.json["status"] as? String == "succeeded", "\(job.text)")
            #expect(job.json["type"] as? String == "notification")
            // The job's id names the notification: no idempotency key of its own to keep for a day.
            let signedText = try #require(
                (try JSONSerialization.jsonObject(with: Data(v2.body)) as? [String: Any])?["signedPayload"] as? String)
            let claims = try #require(
                signedText.split(separator: ".").dropFirst().first.flatMap { AppleBase64.decode($0) }.flatMap {
                    try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any]
                })
            let uuid = try #require(claims["notificationUUID"] as? String)
            #expect(jobId == "notification:" + uuid)
            let keys = api.jobQueue.configuration.keys("default")
            #expect(try await api.jobQueue.redis.send(["EXISTS", keys.idempotency(jobId)]).int == 0)
            let stored = try await api.jobQueue.redis.send(["HGETALL", keys.job(jobId)]).fieldValues
            #expect(stored["idempotencyKey"] == nil && stored["digest"] == nil && stored["status"] == "succeeded", "\(stored)")

            let v1 = try #require(await api.inbox.wait(for: "/v1", count: 1).first)
            let legacy = try await api.call(
                .POST, "/v1/notifications/apple/demo", token: nil, body: String(decoding: v1.body, as: UTF8.self), route: route)
            #expect(legacy.status == 200)
            // A V1 body's job is named by its digest.
            let legacyId = try #require(legacy.json["jobId"] as? String)
            #expect(legacyId.hasPrefix("notification:") && legacyId.utf8.count == 45, "\(legacyId)")
            let legacyJob = try await api.call(
                .GET, "/v1/jobs/\(legacy.json["jobId"] as? String ?? "")?wait=20", route: "GET /v1/jobs/{id}")
            #expect(legacyJob.json["status"] as? String == "succeeded", "\(legacyJob.text)")

            let before = try await api.enqueuedCount()
            let signed = try #require(
                (try JSONSerialization.jsonObject(with: Data(v2.body)) as? [String: Any])?["signedPayload"] as? String)
            let refusals: [(String, Int)] = [
                (#"{"signedPayload":"\#(forged(signed))"}"#, 400), (#"{"signedPayload":"not.a.jws"}"#, 400),
                (#"{"signedPayload":42}"#, 400),
                (#"{"hello":"world"}"#, 400), ("not json", 400), ("", 400),
            ]
            for (text, status) in refusals {
                let reply = try await api.call(.POST, "/v1/notifications/apple/demo", token: nil, body: text, route: route)
                #expect(reply.status == status && !reply.message.isEmpty, "\(text.prefix(40)): \(reply.status) \(reply.text)")
            }
            #expect(try await api.call(.POST, "/v1/notifications/apple/acme", token: nil, body: body, route: route).status == 404)
            // Signed for demo's app: another publisher's URL refuses it.
            #expect(try await api.call(.POST, "/v1/notifications/apple/other", token: nil, body: body, route: route).status == 400)
            #expect(try await api.enqueuedCount() == before)
        }
    }
}
