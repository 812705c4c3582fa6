import APNs
import AppStore
import EntitleCore
import Entitlements
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    /// A device as the routes show it.
    struct DeviceReply: Codable {
        var token: String
        var bundleId: String
        var pushType: String
        var environment: String
        var promotional: Bool
        var registeredAt: Int64

        init(_ device: DeviceRegistry.Device) {
            token = device.token.hex
            bundleId = device.bundleId
            pushType = device.pushType.rawValue
            environment = device.environment.rawValue
            promotional = device.promotional
            registeredAt = device.registeredAt
        }
    }

    struct DevicesReply: Codable {
        var customer: String
        var devices: [DeviceReply]
    }

    struct PushReply: Codable {
        var pushId: String
        var status: String
        var error: String?
        var createdAt: Int64
        var finishedAt: Int64?
        var audience: Int?
        var batches: Int?
        var batchesDone: Int
        var lapsed: Int
        var counts: [String: Int]
        var devices: [PushStore.DeviceResult]
        /// Pass as `?cursor=` for the next page of devices; absent on the last.
        var nextCursor: String?
    }

    /// The publisher's push settings; 409 when the catalog gives it none.
    func pushSettings(_ publisher: Publisher) throws -> Publisher.Push {
        guard let push = publisher.push, settings.pushClients[publisher.id] != nil else {
            throw APIError(.conflict, "pushNotConfigured", "publisher \(publisher.id) has no push settings (catalog: push)")
        }
        return push
    }

    /// `pushType`: alert unless given.
    static func pushType(_ input: RequestInput) throws -> APNsPushType {
        guard let name = try input.string("pushType") else { return .alert }
        guard let type = APNsPushType(rawValue: name) else { throw APIError.badRequest("pushType must be alert, background or voip") }
        return type
    }

    /// `promotional`: false unless given.
    static func promotional(_ input: RequestInput) throws -> Bool {
        switch input.values["promotional"] {
        case nil, .null?: false
        case .bool(let value)?: value
        default: throw APIError.badRequest("promotional must be true or false")
        }
    }

    static func deviceToken(_ text: String, field: String = "token") throws -> DeviceToken {
        guard let token = DeviceToken(text) else {
            throw APIError.badRequest("\(field) must be an APNs device token: hex, 32 to 100 bytes")
        }
        return token
    }

    func registerPush(on routes: RouteTable) {
        // Apps register their customer's devices (with the customer's token); the backend
        // may do everything.
        routes.add(.post, "/v1/customers/{id}/devices") { request, context in
            let who = try caller(request, context)
            let (publisher, named) = try requireCustomerAccess(who, customer: try RequestInput.path(context, "id"))
            let customer = try RequestInput.checkCustomer(named, for: publisher)
            let push = try pushSettings(publisher)
            let input = try await RequestInput.json(request, limit: 4 << 10)
            try input.allow(["token", "bundleId", "pushType", "environment", "promotional"])
            let token = try Self.deviceToken(try input.required("token", maxLength: 256))
            let bundleId = try input.required("bundleId")
            guard publisher.app(bundleId: bundleId) != nil else {
                throw APIError.badRequest("bundleId \(bundleId) is not an app of publisher \(publisher.id)")
            }
            if case .app(_, let key, _) = who, !key.bundleIds.isEmpty, !key.bundleIds.contains(bundleId) {
                throw APIError(.forbidden, "forbidden", "this app key is not for \(bundleId)")
            }
            let pushType = try Self.pushType(input)
            let environment =
                try input.string("environment").map { name in
                    guard let environment = APNsClient.Environment(rawValue: name) else {
                        throw APIError.badRequest("environment must be production or sandbox")
                    }
                    return environment
                } ?? .production
            let promotional = try Self.promotional(input)
            let device = DeviceRegistry.Device(
                token: token, bundleId: bundleId, pushType: pushType, environment: environment, promotional: promotional,
                registeredAt: AppleTimestamp(Date()).milliseconds)
            _ = try await store.devices.register(device, publisher: publisher.id, customer: customer, limit: push.maxDevicesPerCustomer)
            return try JSONBody.response(encoding: DeviceReply(device), status: .created)
        }
        routes.add(.delete, "/v1/customers/{id}/devices/{token}") { request, context in
            let who = try caller(request, context)
            let (publisher, named) = try requireCustomerAccess(who, customer: try RequestInput.path(context, "id"))
            let customer = try RequestInput.checkCustomer(named, for: publisher)
            _ = try pushSettings(publisher)
            let token = try Self.deviceToken(try RequestInput.path(context, "token"))
            // An app key limited to some apps removes only those apps' devices.
            if case .app(_, let key, _) = who, !key.bundleIds.isEmpty,
                let device = try await store.devices.devices(publisher: publisher.id, customer: customer).first(where: { $0.token == token }
                ),
                !key.bundleIds.contains(device.bundleId)
            {
                throw APIError(.forbidden, "forbidden", "this app key is not for \(device.bundleId)")
            }
            guard try await store.devices.remove(token: token, publisher: publisher.id, customer: customer) else {
                throw APIError.notFound("customer \(customer) has no device \(token)")
            }
            return Response(status: .noContent)
        }
        routes.add(.get, "/v1/customers/{id}/devices") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let customer = try RequestInput.checkCustomer(try RequestInput.path(context, "id"), for: publisher)
            _ = try pushSettings(publisher)
            let devices = try await store.devices.devices(publisher: publisher.id, customer: customer)
            return try JSONBody.response(encoding: DevicesReply(customer: customer, devices: devices.map(DeviceReply.init)))
        }
        routes.add(.post, "/v1/pushes") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            _ = try pushSettings(publisher)
            let body = try await RequestInput.body(request, limit: 64 << 10)
            let input = RequestInput(try RequestInput.jsonObject(body))
            let pushRequest = try Self.pushRequest(input, body: body, publisher: publisher)
            let key = try input.string("idempotencyKey", maxLength: 128)
            let submitted: String?
            do {
                submitted = try await store.pushes.submit(
                    pushRequest, publisher: publisher.id, idempotencyKey: key, jobQueue: jobQueue, queue: configuration.queue)
            } catch let error as JobQueueError {
                throw APIError.badRequest(error.message)
            }
            guard let pushId = submitted else {
                throw APIError(.conflict, "idempotencyKeyReused", "idempotencyKey \(key ?? "") was used for another push")
            }
            return try JSONBody.response(encoding: ["pushId": pushId], status: .accepted)
        }
        routes.add(.get, "/v1/pushes/{id}") { request, context in
            let publisher = try secretKeyPublisher(request, context)
            let id = try RequestInput.path(context, "id")
            guard id.utf8.count <= 64,
                id.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }),
                let record = try await store.pushes.record(publisher: publisher.id, id: id)
            else { throw APIError.notFound("publisher \(publisher.id) has no push \(id)") }
            let query = request.uri.queryParameters
            let cursor = query.get("cursor").map { String($0) } ?? "0"
            guard cursor.utf8.count <= 20, UInt64(cursor) != nil else {
                throw APIError.badRequest("cursor must be the nextCursor of a previous page")
            }
            let limit =
                try query.get("limit").map { text -> Int in
                    guard let value = Int(text), (1...1000).contains(value) else { throw APIError.badRequest("limit must be 1 to 1000") }
                    return value
                } ?? 100
            let page = try await store.pushes.deviceResults(publisher: publisher.id, id: id, cursor: cursor, count: limit)
            var counts: [String: Int] = [:]
            for (result, count) in record.counts where count != 0 { counts[result.rawValue] = count }
            return try JSONBody.response(
                encoding: PushReply(
                    pushId: id, status: record.status, error: record.error, createdAt: record.createdAt, finishedAt: record.finishedAt,
                    audience: record.audienceSize, batches: record.batches, batchesDone: record.batchesDone, lapsed: record.lapsed,
                    counts: counts,
                    devices: page.results.map {
                        var item = $0; item.attempt = nil; return item
                    },
                    nextCursor: page.next == "0" ? nil : page.next))
        }
    }

    /// `POST /v1/pushes`'s body checked (for `entitle push`, which builds the same body).
    package static func pushRequest(json body: [UInt8], publisher: Publisher) throws -> PushRequest {
        try pushRequest(RequestInput(try RequestInput.jsonObject(body)), body: body, publisher: publisher)
    }

    /// A push request checked as the publisher's catalog and APNs would check it: nothing is
    /// queued for a push that cannot reach anyone.
    static func pushRequest(_ input: RequestInput, body: [UInt8], publisher: Publisher) throws -> PushRequest {
        try input.allow([
            "bundleId", "audience", "payload", "pushType", "priority", "expiration", "collapseId", "promotional", "idempotencyKey",
        ])
        let bundleId = try input.required("bundleId")
        guard publisher.app(bundleId: bundleId) != nil else {
            throw APIError.badRequest("bundleId \(bundleId) is not an app of publisher \(publisher.id)")
        }
        guard let audienceInput = try input.object("audience"), audienceInput.values.count == 1 else {
            throw APIError.badRequest("audience must be one of {\"entitlement\"}, {\"offerId\"}, {\"customer\"}, {\"customers\": [...]}")
        }
        let audience: PushRequest.Audience
        if let name = try audienceInput.string("entitlement") {
            guard publisher.offers.contains(where: { $0.entitlements.contains(name) }) else {
                throw APIError.badRequest("no offer of publisher \(publisher.id) gives entitlement \(name)")
            }
            audience = .entitlement(name)
        } else if let offer = try audienceInput.string("offerId") {
            guard publisher.offer(offer) != nil else { throw APIError.badRequest("publisher \(publisher.id) has no offer \(offer)") }
            audience = .offer(offer)
        } else if let customer = try audienceInput.string("customer") {
            audience = .customer(try RequestInput.checkCustomer(customer, for: publisher))
        } else if let customers = try audienceInput.strings(
            "customers", count: 1...10_000, message: "audience.customers must list 1 to 10,000 customers")
        {
            audience = .customers(
                try customers.map { try RequestInput.checkCustomer($0, for: publisher, field: "audience.customers") })
        } else {
            throw APIError.badRequest("audience must be one of {\"entitlement\"}, {\"offerId\"}, {\"customer\"}, {\"customers\": [...]}")
        }
        let pushType = try Self.pushType(input)
        let priority =
            input.values["priority"] == nil ? nil : try input.integer("priority", in: 1...10, message: "priority must be 10, 5 or 1")
        let expiration =
            input.values["expiration"] == nil
            ? nil : Int64(try input.integer("expiration", in: 0...253_402_300_799, message: "expiration must be UNIX seconds, or 0"))
        let collapseId = try input.string("collapseId", maxLength: 64)
        let promotional = try Self.promotional(input)
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let payloadObject = object["payload"] as? [String: Any]
        else { throw APIError.badRequest("payload must be a JSON object (the APNs payload)") }
        let payload = String(
            decoding: try JSONSerialization.data(withJSONObject: payloadObject, options: [.sortedKeys, .withoutEscapingSlashes]),
            as: UTF8.self)
        do {
            let push = try APNsPush(
                bundleId: bundleId, pushType: pushType, priority: priority, expiration: expiration, collapseId: collapseId, payload: payload
            )
            return PushRequest(push: push, audience: audience, promotional: promotional)
        } catch {
            throw APIError.badRequest(error.message)
        }
    }
}
