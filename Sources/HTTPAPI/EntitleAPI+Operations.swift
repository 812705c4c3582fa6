import EntitleCore
import Entitlements
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    func registerOperations(on routes: RouteTable) {
        routes.add(.post, "/v1/transfers") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let input = try await RequestInput.json(request, limit: 64 << 10)
            try input.allow(["originalTransactionId", "to", "from"])
            let transaction = try input.required("originalTransactionId", maxLength: 32)
            guard transaction.allSatisfy(\.isASCIIDigit) else {
                throw APIError.badRequest("originalTransactionId must be the App Store's digits")
            }
            let to = try RequestInput.checkCustomer(try input.required("to"), for: publisher, field: "to")
            let from = try input.string("from").map { try RequestInput.checkCustomer($0, for: publisher, field: "from") }
            let payload = JobPayloads.Transfer(publisher: publisher.id, originalTransactionId: transaction, to: to, from: from)
            // One job at a time per transaction; a repeat once it has finished is a new transfer
            // (a purchase goes back and forth), an exact repeat while it runs the same job.
            let id = try await enqueueOnce(
                try EnqueueRequest(payload, queue: configuration.queue, uniqueKey: "purchase:\(publisher.id):\(transaction)"))
            return JSONBody.jobId(id, status: .accepted)
        }

        // Every tenant's counters: operators only.
        routes.add(.get, "/v1/queues") { request, context in
            try requireAdmin(request, context)
            return try JSONBody.response(encoding: ["queues": try await queueStats()])
        }

        // The same counters as /v1/queues: operators (and their Prometheus) only.
        routes.add(.get, "/metrics") { request, context in
            try requireAdmin(request, context)
            guard let metrics else { throw APIError.notFound("metrics are off") }
            do {
                try await recordQueueGauges()
            } catch {
                // The scrape still answers with what the process knows; the gauges keep their last values.
                logger.warning("queue gauges not refreshed for /metrics", metadata: ["error": "\(error)"])
            }
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: await metrics())))
        }

        routes.add(.get, "/healthz") { _, _ in try JSONBody.response(encoding: ["status": "ok"]) }

        // Ready when Redis answers: a load balancer sends nothing to an instance that cannot enqueue.
        routes.add(.get, "/readyz") { _, _ in
            do {
                _ = try await jobQueue.redis.send(["PING"])
                return try JSONBody.response(encoding: ["status": "ready"])
            } catch {
                return try JSONBody.response(
                    encoding: ["status": "unavailable", "message": "Redis does not answer"], status: .serviceUnavailable)
            }
        }

        // The dashboard's operator routes.
        routes.add(.get, "/v1/admin/queues/{queue}/recent") { request, context in
            try requireAdmin(request, context)
            let queue = try RequestInput.path(context, "queue")
            let limit = min(200, max(1, request.uri.queryParameters.get("limit").flatMap { Int($0) } ?? 50))
            return try JSONBody.response(encoding: ["jobs": try await jobQueue.recentJobs(queue: queue, limit: limit).map { $0.document() }]
            )
        }
        // A day of every queue's figures, a sample a minute (the dashboard's charts' history).
        routes.add(.get, "/v1/admin/queues/history") { request, context in
            try requireAdmin(request, context)
            return try JSONBody.response(encoding: ["minutes": try await QueueHistory(jobQueue: jobQueue).samples()])
        }
        routes.add(.get, "/v1/admin/queues/{queue}/dead") { request, context in
            try requireAdmin(request, context)
            let queue = try RequestInput.path(context, "queue")
            return try JSONBody.response(encoding: ["jobs": try await jobQueue.deadJobs(queue: queue, limit: 100).map { $0.document() }])
        }
        for action in ["retry", "purge"] {
            routes.add(.post, "/v1/admin/queues/{queue}/dead/\(action)") { request, context in
                try requireAdmin(request, context)
                let queue = try RequestInput.path(context, "queue")
                let input = try await RequestInput.json(request, limit: 64 << 10)
                try input.allow(["ids"])
                let ids = try input.strings("ids", count: 1...1000, message: "ids must be a list of 1 to 1000 job ids")
                let count =
                    action == "retry"
                    ? try await jobQueue.retryDead(queue: queue, ids: ids) : try await jobQueue.purgeDead(queue: queue, ids: ids)
                return try JSONBody.response(encoding: [action == "retry" ? "retried" : "purged": count])
            }
        }
        routes.add(.get, "/v1/admin/publishers/{publisherId}/customers/{id}") { request, context in
            try requireAdmin(request, context)
            let publisher = try RequestInput.path(context, "publisherId")
            guard let catalogEntry = settings.catalog.publisher(publisher) else { throw APIError.notFound("no publisher \(publisher)") }
            let customer = catalogEntry.canonicalCustomerId(try RequestInput.path(context, "id"))
            let (state, version) = try await store.load(publisher: publisher, customer: customer)
            guard version > 0 else { throw APIError.notFound("no customer \(customer) of publisher \(publisher)") }
            let at = try await dateParameter(request, "at")
            return try JSONBody.response(encoding: CustomerDocument(state, at: at))
        }
    }

    func queueStats() async throws -> [QueueStats] {
        var all: [QueueStats] = []
        for queue in try await jobQueue.knownQueues() { all.append(try await jobQueue.stats(queue: queue)) }
        return all
    }

    /// Reads every queue's stats, which sets their gauges (depth, age, consumers) for the scrape.
    func recordQueueGauges() async throws {
        for queue in try await jobQueue.knownQueues() { _ = try await jobQueue.stats(queue: queue) }
    }
}
