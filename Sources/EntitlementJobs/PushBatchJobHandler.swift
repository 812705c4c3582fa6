import APNs
import AppStore
import Crypto
import EntitleCore
import Entitlements
import Foundation
import JobQueue

/// `push-batch`: sends a push to the devices of one batch of its audience.
///
/// Access is checked as the batch is sent (a customer who lapsed, was refunded or
/// transferred the purchase away since the push was queued gets nothing). Each device's
/// result is kept; a rerun sends only to devices without a final one. Before a device is
/// sent to it is claimed in flight by this run (atomically: two runs of one batch never both
/// send), so a worker that dies while APNs has it leaves it `unconfirmed`, as does a push
/// APNs got but did not answer: never sent twice. APNs' answers: a gone token is forgotten (unless
/// registered again since), throttling and server errors are sent again with back-off, a
/// refusal of the push itself (key, topic, payload) fails the push.
package struct PushBatchJobHandler: EntitlementJobHandler {
    let service: EntitlementService
    var asksApple: Bool { false }

    /// Pushes in flight at once: streams of the one HTTP/2 connection.
    package static let concurrency = 100

    package init(service: EntitlementService) { self.service = service }

    package struct Result: Sendable, Hashable, Codable {
        package var pushId: String
        package var batch: Int
        package var customers: Int
        package var lapsed: Int
        package var sent: Int
        package var refused: Int
        package var unconfirmed: Int
    }

    struct Target: Sendable {
        var customer: String
        var device: DeviceRegistry.Device
    }

    func run(_ job: JobContext) async throws -> Result {
        let payload = try JobPayloads.decode(JobPayloads.PushBatch.self, job.payload)
        let publisher = try service.publisher(payload.publisher)
        do {
            return try await send(payload, publisher: publisher, job: job)
        } catch {
            // The batch's last word (a refusal, or its attempts spent): it counts as done, so
            // the push reaches `finished`; what was not sent says `pending` or its reason.
            let final = error is JobRefusal || (error as? JobFailure).map { !$0.isRetryable } ?? false || job.attempt >= job.maxAttempts
            if final {
                _ = try? await service.store.pushes.finishBatch(
                    publisher: publisher.id, id: payload.pushId, batch: payload.batch, lapsed: 0, now: Self.nowMilliseconds())
            }
            throw error
        }
    }

    func send(_ payload: JobPayloads.PushBatch, publisher: Publisher, job: JobContext) async throws -> Result {
        let pushes = service.store.pushes
        guard let record = try await pushes.record(publisher: publisher.id, id: payload.pushId) else {
            throw JobRefusal.notPossible(code: "unknownPush", "push \(payload.pushId) of \(publisher.id) is not kept (expired?)")
        }
        var result = Result(pushId: payload.pushId, batch: payload.batch, customers: 0, lapsed: 0, sent: 0, refused: 0, unconfirmed: 0)
        guard record.status != "failed" else { return result }
        guard let client = service.configuration.pushClients[publisher.id] else {
            throw JobRefusal.notPossible(code: "pushNotConfigured", "publisher \(publisher.id) has no push key")
        }
        let size = PushJobHandler.batchSize
        let customers = try await pushes.audience(
            publisher: publisher.id, id: payload.pushId, range: payload.batch * size..<(payload.batch + 1) * size)
        result.customers = customers.count
        let now = try await service.configuration.clock.now()
        let entitled = try await entitledNow(customers, publisher: publisher.id, audience: record.request.audience, at: now)
        result.lapsed = customers.count - entitled.count
        let devices = try await service.store.devices.devices(publisher: publisher.id, customers: entitled)
        var targets: [Target] = []
        for customer in entitled {
            for device in devices[customer] ?? [] where record.request.reaches(device) {
                targets.append(Target(customer: customer, device: device))
            }
        }
        // This run's own mark: a rerun (after a crash, a reap, or an attempt given back) never
        // takes another run's marks for its own.
        let run = UUID().uuidString
        var retry = false
        var failure: String?
        for start in stride(from: 0, to: targets.count, by: Self.concurrency) {
            let chunk = Array(targets[start..<min(start + Self.concurrency, targets.count)])
            let claimed = try await pushes.claimForSending(
                publisher: publisher.id, id: payload.pushId, run: run, devices: chunk.map { ($0.device.token.hex, $0.customer) })
            let sending = chunk.filter { claimed.contains($0.device.token.hex) }
            let answers = await send(sending, push: record.request.push, pushId: payload.pushId, client: client)
            var results: [PushStore.DeviceResult] = []
            for (target, answer) in zip(sending, answers) {
                let token = target.device.token.hex
                func record(_ outcome: PushStore.Result, _ reason: String? = nil) {
                    results.append(.init(token: token, customer: target.customer, result: outcome, reason: reason))
                }
                switch answer {
                case .failure(let error) where error.code == .unanswered:
                    record(.unconfirmed, error.message)
                    result.unconfirmed += 1
                case .failure(let error) where error.code == .invalidConfiguration:
                    // The key cannot sign: no device would get it, and no retry mends that.
                    record(.refused, error.message)
                    result.refused += 1
                    failure = failure ?? error.message
                case .failure(let error):
                    record(.pending, error.message)
                    retry = true
                case .success(let response) where response.delivered:
                    record(.sent)
                    result.sent += 1
                case .success(let response):
                    let reason = response.reason?.rawValue ?? "status \(response.status)"
                    switch response.disposition ?? .refuseDevice {
                    case .dropToken:
                        let at = response.unregisteredAt ?? Self.nowMilliseconds()
                        _ = try await service.store.devices.forget(
                            token: target.device.token, publisher: publisher.id, customer: target.customer, unregisteredAt: at)
                        record(.refused, reason)
                        result.refused += 1
                    case .retry, .renewProviderToken:
                        record(.pending, reason)
                        retry = true
                    case .failPush:
                        record(.refused, reason)
                        result.refused += 1
                        failure = failure ?? reason
                    case .refuseDevice:
                        record(.refused, reason)
                        result.refused += 1
                    }
                }
            }
            try await pushes.setResults(publisher: publisher.id, id: payload.pushId, results)
            if failure != nil { break }
        }
        if let failure {
            // Every device would be refused alike: the push fails, with APNs' reason.
            try await pushes.fail(
                publisher: publisher.id, id: payload.pushId, reason: "APNs refused the push: \(failure)", now: Self.nowMilliseconds())
            throw JobRefusal.notPossible(code: "apnsRefused", "APNs refused the push: \(failure)")
        }
        if retry {
            guard job.attempt < job.maxAttempts else {
                // Out of attempts: what is still pending is given up on, and said so.
                let known = try await pushes.results(publisher: publisher.id, id: payload.pushId, tokens: targets.map(\.device.token.hex))
                let given = known.values.filter { $0.result == .pending }.map { item in
                    PushStore.DeviceResult(
                        token: item.token, customer: item.customer, result: .refused,
                        reason: "gave up: \(item.reason ?? "APNs kept failing")")
                }
                try await pushes.setResults(publisher: publisher.id, id: payload.pushId, given)
                result.refused += given.count
                _ = try await pushes.finishBatch(
                    publisher: publisher.id, id: payload.pushId, batch: payload.batch, lapsed: result.lapsed, now: Self.nowMilliseconds())
                return result
            }
            // The batch's back-off (1 s doubling to ten minutes): APNs asks 5xx to be retried late.
            throw JobFailure.retryable("apnsRetry", "APNs asked to send again later")
        }
        _ = try await pushes.finishBatch(
            publisher: publisher.id, id: payload.pushId, batch: payload.batch, lapsed: result.lapsed, now: Self.nowMilliseconds())
        return result
    }

    static func nowMilliseconds() -> Int64 { AppleTimestamp(Date()).milliseconds }

    /// The customers of `customers` who may get the push now: for an entitlement or offer
    /// audience, those the customer's own document says have it at `date`.
    func entitledNow(_ customers: [String], publisher: String, audience: PushRequest.Audience, at date: Date) async throws -> [String] {
        guard audience.followsAccess else { return customers }
        var entitled: [String] = []
        let states = try await service.store.load(publisher: publisher, customers: customers)
        for customer in customers {
            guard let state = states[customer] else { continue }
            switch audience {
            case .entitlement(let name): if state.entitlements(at: date).contains(name) { entitled.append(customer) }
            case .offer(let offer): if state.periods(at: date).contains(where: { $0.offerId == offer }) { entitled.append(customer) }
            case .customer, .customers: entitled.append(customer)
            }
        }
        return entitled
    }

    /// Sends to every target at once (the chunk is at most `concurrency`): streams of one
    /// HTTP/2 connection. Answers in the targets' order.
    func send(_ targets: [Target], push: APNsPush, pushId: String, client: APNsClient) async -> [Swift.Result<APNsResponse, APNsError>] {
        await withTaskGroup(of: (Int, Swift.Result<APNsResponse, APNsError>).self) { group in
            for (index, target) in targets.enumerated() {
                group.addTask {
                    do {
                        let id = Self.apnsId(pushId: pushId, token: target.device.token.hex)
                        return (
                            index,
                            .success(
                                try await client.send(push, to: target.device.token, environment: target.device.environment, apnsId: id))
                        )
                    } catch let error as APNsError {
                        return (index, .failure(error))
                    } catch {
                        return (index, .failure(APNsError(.unavailable, "\(error)")))
                    }
                }
            }
            var answers = [Swift.Result<APNsResponse, APNsError>?](repeating: nil, count: targets.count)
            for await (index, answer) in group { answers[index] = answer }
            return answers.map { $0 ?? .failure(APNsError(.unavailable, "not sent")) }
        }
    }

    /// The same `apns-id` for the same push and device, every attempt: APNs' logs and the
    /// local APNs tell a second delivery by it.
    static func apnsId(pushId: String, token: String) -> UUID {
        var bytes = Array(SHA256.hash(data: Array((pushId + ":" + token).utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11],
                bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}
