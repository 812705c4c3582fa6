import AppStore
import DurationUnits
import Foundation
import Hummingbird
import LocalAPNs
import NIOCore

/// The control API under `/simulator/` (documented in `docs/simulator.md`).
extension SimulatorServer {
    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        addControlRoutes(router)
        addAppleRoutes(router)
        return router
    }

    private func addControlRoutes(_ router: Router<BasicRequestContext>) {
        let store = self.store
        let keys = self.keys
        let faults = self.faults
        let catalog = configuration.catalog
        let control = router.group("simulator")

        control.get("root.cer") { _, _ in Response.certificate(try store.signing.rootDER) }
        control.get("receipt-root.cer") { _, _ in Response.certificate(try store.receiptSigning.rootDER) }
        control.get("products") { _, _ in Response.encoded(catalog.products) }
        // The shared secrets are the simulator's demo values: a development worker reads them here.
        control.get("apps") { _, _ in
            Response.encoded(
                catalog.apps.map { AppSummary(bundleId: $0.bundleId, appAppleId: $0.appAppleId, sharedSecret: $0.sharedSecret) })
        }

        addLocalAPNsRoutes(control)

        control.post("purchases") { request, _ in
            try await Self.handle {
                Response.encoded(try await store.purchase(try await Self.decode(PurchaseRequest.self, request)), status: .created)
            }
        }

        control.get("clock") { _, _ in
            Response.encoded(
                ClockState(now: AppleTimestamp(store.clock.now), advancedSeconds: store.clock.advanced, frozen: store.clock.isFrozen))
        }
        control.post("clock/freeze") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(ClockFreeze.self, request)
                store.clock.freeze(body.frozen)
                return Response.encoded(
                    ClockState(now: AppleTimestamp(store.clock.now), advancedSeconds: store.clock.advanced, frozen: store.clock.isFrozen))
            }
        }
        control.post("clock/advance") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(ClockAdvance.self, request)
                let now = try await store.advanceClock(by: body.seconds)
                return Response.encoded(
                    ClockState(now: AppleTimestamp(now), advancedSeconds: store.clock.advanced, frozen: store.clock.isFrozen))
            }
        }

        control.post("keys") { request, _ in
            try await Self.handle {
                try keys.register(try await Self.decode(APIKeyRegistry.Registration.self, request))
                return Response(status: .noContent)
            }
        }
        control.post("faults") { request, _ in
            try await Self.handle {
                try faults.add(try await Self.decode(FaultInjector.Fault.self, request), now: store.clock.now)
                return Response(status: .noContent)
            }
        }
        control.delete("faults") { _, _ in
            faults.clear()
            return Response(status: .noContent)
        }

        control.get("subscriptions/:id") { _, context in
            try await Self.handle { Response.encoded(try await store.subscriptionSnapshot(try context.parameters.require("id"))) }
        }
        control.post("subscriptions/:id/:event") { request, context in
            try await Self.handle {
                let id = try context.parameters.require("id")
                let body = try await Self.decode(LifecycleRequest.self, request, allowEmpty: true)
                let snapshot: SubscriptionSnapshot
                switch try context.parameters.require("event") {
                case "renew": snapshot = try await store.renew(id)
                case "migrate": snapshot = try await store.migrate(id)
                case "auto-renew-off": snapshot = try await store.setAutoRenew(id, enabled: false)
                case "auto-renew-on": snapshot = try await store.setAutoRenew(id, enabled: true)
                case "billing-failure": snapshot = try await store.failBilling(id)
                case "billing-recovery": snapshot = try await store.recoverBilling(id)
                case "price-increase":
                    guard let price = body.price else { throw SimulatorError(.invalidRequest, "price-increase needs a price") }
                    snapshot = try await store.increasePrice(id, price: price, requiresConsent: body.requiresConsent ?? true)
                case "price-increase-consent":
                    guard let accept = body.accept else { throw SimulatorError(.invalidRequest, "price-increase-consent needs accept") }
                    snapshot = try await store.respondToPriceIncrease(id, accept: accept)
                case "metadata-update": snapshot = try await store.advancedCommerceChange(id, .metadataUpdate)
                case "price-change": snapshot = try await store.advancedCommerceChange(id, .priceChange)
                case "offer-redeemed":
                    snapshot = try await store.redeemOffer(id, subtype: body.subtype.map { NotificationSubtype(rawValue: $0) })
                case "extend":
                    guard let days = body.days else { throw SimulatorError(.invalidRequest, "extend needs days") }
                    snapshot = try await store.extendRenewalDate(
                        id, days: days, reasonCode: body.reasonCode ?? 0, requestIdentifier: UUID().uuidString
                    ).snapshot
                case let event:
                    guard let change = SimulatedAppStore.ProductChange(rawValue: event) else {
                        throw SimulatorError(.notFound, "no subscription event \"\(event)\"")
                    }
                    guard let productId = body.productId else { throw SimulatorError(.invalidRequest, "\(event) needs a productId") }
                    snapshot = try await store.changeProduct(id, to: productId, as: change)
                }
                return Response.encoded(snapshot)
            }
        }

        control.get("transactions/:id") { _, context in
            try await Self.handle { Response.encoded(try await store.transactionState(try context.parameters.require("id"))) }
        }
        control.post("transactions/:id/:event") { request, context in
            try await Self.handle {
                let id = try context.parameters.require("id")
                let body = try await Self.decode(LifecycleRequest.self, request, allowEmpty: true)
                let snapshot: TransactionSnapshot
                switch try context.parameters.require("event") {
                case "refund": snapshot = try await store.refund(id, reason: body.reason ?? 0, percentage: body.percentage)
                case "refund-declined": snapshot = try await store.declineRefund(id)
                case "refund-reversed": snapshot = try await store.reverseRefund(id)
                case "revoke": snapshot = try await store.revoke(id)
                case "consumption-request": snapshot = try await store.requestConsumption(id, reason: body.consumptionReason)
                case "rescind-consent": snapshot = try await store.rescindConsent(id)
                case let other: throw SimulatorError(.notFound, "no transaction event \"\(other)\"")
                }
                return Response.encoded(snapshot)
            }
        }

        control.post("external-purchase-tokens") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(ExternalPurchaseTokenRequest.self, request)
                return Response.encoded(try await store.externalPurchaseToken(body))
            }
        }
        control.post("mass-extensions") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(MassExtensionRequest.self, request)
                let uuids = try await store.extendAll(
                    productId: body.productId, bundleId: body.bundleId, environment: body.environment ?? .sandbox, days: body.days,
                    reasonCode: body.reasonCode ?? 0, requestIdentifier: body.requestIdentifier ?? UUID().uuidString)
                return Response.encoded(["notifications": uuids])
            }
        }
        control.get("notifications") { _, _ in
            Response.encoded(await store.notifications.all().map(NotificationSummary.init))
        }
        control.get("notifications/pending") { _, _ in
            let (pending, held) = await store.notifications.outstanding()
            return Response.encoded(DeliveryState(pending: pending, held: held))
        }
        control.post("notifications/delivery") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(DeliveryRequest.self, request)
                await store.notifications.setDelivery(body.enabled, bundleId: body.bundleId)
                return Response(status: .noContent)
            }
        }
        control.post("notifications/hold") { _, _ in
            await store.notifications.hold()
            return Response(status: .noContent)
        }
        control.post("notifications/release") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(ReleaseRequest.self, request, allowEmpty: true)
                return Response.encoded(await store.notifications.release(order: body.order ?? .sent))
            }
        }
        control.post("notifications/:uuid/resend") { _, context in
            try await Self.handle {
                try await store.notifications.resend(try context.parameters.require("uuid"))
                return Response(status: .accepted)
            }
        }
        control.post("notifications/url") { request, _ in
            try await Self.handle {
                let body = try await Self.decode(NotificationURLs.self, request)
                for url in [body.url, body.v1Url].compactMap({ $0 }) {
                    guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
                        throw SimulatorError(.invalidRequest, "\(url) is not an http(s) URL")
                    }
                }
                await store.notifications.setURLs(v2: body.url, v1: body.v1Url)
                return Response(status: .noContent)
            }
        }
    }

    // MARK: Plumbing

    static let maximumBody = 1 << 20

    /// Decodes a JSON body; with `allowEmpty` (lifecycle options) an empty body is `{}`.
    static func decode<Value: Decodable>(_ type: Value.Type, _ request: Request, allowEmpty: Bool = false) async throws -> Value {
        let buffer = try await request.body.collect(upTo: maximumBody)
        let data = Data(buffer.readableBytesView)
        do {
            return try JSONDecoder().decode(Value.self, from: data.isEmpty && allowEmpty ? Data("{}".utf8) : data)
        } catch {
            throw SimulatorError(.invalidRequest, "the body is not a valid \(Value.self): \(Self.describe(error))")
        }
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _): "\(key.stringValue) is missing"
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "\(context.codingPath.map(\.stringValue).joined(separator: ".")) has the wrong type"
        case DecodingError.dataCorrupted(let context):
            context.codingPath.isEmpty
                ? "malformed JSON" : "\(context.codingPath.map(\.stringValue).joined(separator: ".")): \(context.debugDescription)"
        default: "\(error)"
        }
    }

    /// Maps the simulator's errors to HTTP: 400, 404, 409 with `{"error", "message"}`.
    static func handle(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let error as SimulatorError {
            let status: HTTPResponse.Status =
                switch error.code {
                case .notFound: .notFound
                case .conflict: .conflict
                default: .badRequest
                }
            return Response.encoded(ControlError(error: error.code.rawValue, message: error.message), status: status)
        }
    }
}

struct AppSummary: Codable { var bundleId: String; var appAppleId: Int64; var sharedSecret: String? }
struct ClockState: Codable { var now: AppleTimestamp; var advancedSeconds: Double; var frozen: Bool }
struct ClockFreeze: Codable { var frozen: Bool }
struct DeliveryState: Codable { var pending: Int; var held: Int }
struct ClockAdvance: Codable { var seconds: Double }
struct ReleaseRequest: Codable { var order: NotificationDispatcher.ReleaseOrder? }
/// `POST /simulator/notifications/delivery`: switch delivery off (or on) for one app, or all.
struct DeliveryRequest: Codable {
    var enabled: Bool
    var bundleId: String?
}
struct NotificationURLs: Codable { var url: String?; var v1Url: String? }
struct ControlError: Codable { var error: String; var message: String }

/// One notification in `GET /simulator/notifications`.
struct NotificationSummary: Codable {
    var notificationUUID: String
    var notificationType: String
    var subtype: String?
    var transactionId: String
    var bundleId: String
    var environment: String
    var createdAt: AppleTimestamp
    var delivered: Bool
    var sendAttempts: [SendAttemptItem]
    var v1Attempts: [SendAttemptItem]
    var signedPayload: String

    init(_ record: NotificationDispatcher.Record) {
        let notification = record.notification
        notificationUUID = notification.uuid
        notificationType = notification.type.rawValue
        subtype = notification.subtype?.rawValue
        transactionId = notification.transactionId
        bundleId = notification.bundleId
        environment = notification.environment.rawValue
        createdAt = AppleTimestamp(notification.createdAt)
        delivered = record.delivered
        sendAttempts = record.attempts
        v1Attempts = record.v1Attempts
        signedPayload = notification.signedPayload
    }
}

extension Response {
    static func encoded(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(
            status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func jsonBytes(_ bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func certificate(_ der: [UInt8]) -> Response {
        Response(status: .ok, headers: [.contentType: "application/pkix-cert"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: der)))
    }
}

extension SimulatorServer {
    /// How many pushes the local APNs accepted, and its answers by status.
    struct LocalAPNsStats: Codable {
        var accepted: Int
        var statuses: [String: Int]
    }

    /// Where the local APNs is and the CA its certificate chains to.
    struct LocalAPNsInfo: Codable {
        var url: String
        var certificateAuthority: String
    }

    /// The local APNs's control routes under `/simulator/apns`: where it is, keys, the pushes
    /// it accepted, faults to answer.
    func addLocalAPNsRoutes(_ control: RouterGroup<BasicRequestContext>) {
        guard let apns else { return }
        let state = apns.state
        let port = apnsPort
        let host = apns.configuration.host
        control.get("apns") { _, _ in
            guard let listening = await port.value() else { return Response(status: .serviceUnavailable) }
            return Response.encoded(LocalAPNsInfo(url: "https://\(host):\(listening)", certificateAuthority: apns.certificateAuthorityPEM))
        }
        control.post("apns/keys") { request, _ in
            try await Self.handle {
                await state.register(try await Self.decode(LocalAPNs.Key.self, request))
                return Response(status: .created)
            }
        }
        control.get("apns/pushes") { _, _ in Response.encoded(await state.pushes()) }
        // Counts only: a bench's hundred thousand pushes are not read back whole.
        control.get("apns/stats") { _, _ in
            let statuses = await state.statusCounts()
            return Response.encoded(
                LocalAPNsStats(
                    accepted: await state.pushes().count,
                    statuses: Dictionary(uniqueKeysWithValues: statuses.map { (String($0.key), $0.value) })))
        }
        control.delete("apns/pushes") { _, _ in
            await state.clearPushes()
            return Response(status: .noContent)
        }
        control.post("apns/faults") { request, _ in
            try await Self.handle {
                await state.inject(try await Self.decode(LocalAPNs.Fault.self, request))
                return Response(status: .created)
            }
        }
        control.delete("apns/faults") { _, _ in
            await state.clearFaults()
            return Response(status: .noContent)
        }
    }
}
