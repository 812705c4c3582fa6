import AppStore
import DurationUnits
import Foundation
import Hummingbird
import NIOCore

/// Apple's endpoints at Apple's paths: `/verifyReceipt` and `/inApps/...` answer as
/// production, the same under `/sandbox` as sandbox.
extension SimulatorServer {
    func addAppleRoutes(_ router: Router<BasicRequestContext>) {
        addVerifyReceipt(router.group(""), sandbox: false)
        addVerifyReceipt(router.group("sandbox"), sandbox: true)
        addServerAPI(router.group("inApps"), environment: .production)
        addServerAPI(router.group("sandbox/inApps"), environment: .sandbox)
    }

    private func addVerifyReceipt(_ group: RouterGroup<BasicRequestContext>, sandbox: Bool) {
        let store = self.store
        let faults = self.faults
        group.post("verifyReceipt") { request, _ in
            if let fault = faults.take(.verifyReceipt, path: request.uri.path, now: store.clock.now) {
                if let status = fault.receiptStatus {
                    return Response.jsonBytes(Array(#"{"status":\#(status),"is-retryable":\#(status == 21005 || status >= 21100)}"#.utf8))
                }
                return Response(status: .init(code: fault.status ?? 503))
            }
            let body = try await request.body.collect(upTo: Self.maximumBody)
            return Response.jsonBytes(await store.verifyReceipt(body: Array(body.readableBytesView), sandbox: sandbox))
        }
    }

    private func addServerAPI(_ group: RouterGroup<BasicRequestContext>, environment: AppStoreEnvironment) {
        let store = self.store

        group.get("v1/transactions/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.transactionInfo(try Self.id(context), environment: environment, bundleId: bundleId)
            }
        }
        group.get("v2/history/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                let sort = request.uri.queryParameters.get("sort") ?? "ASCENDING"
                guard sort == "ASCENDING" || sort == "DESCENDING" else { throw .badRequest(4_000_021, "Invalid sort.") }
                return try await store.transactionHistory(
                    try Self.id(context), environment: environment, bundleId: bundleId,
                    revision: request.uri.queryParameters.get("revision"), descending: sort == "DESCENDING")
            }
        }
        group.get("v1/subscriptions/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                var statuses = Set<Int>()
                for value in request.uri.queryParameters.getAll("status") {
                    guard let status = Int(value), (1...5).contains(status) else { throw .badRequest(4_000_031, "Invalid status.") }
                    statuses.insert(status)
                }
                return try await store.subscriptionStatuses(
                    try Self.id(context), environment: environment, bundleId: bundleId, statuses: statuses)
            }
        }
        group.get("v2/refund/lookup/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.refundHistory(
                    try Self.id(context), environment: environment, bundleId: bundleId,
                    revision: request.uri.queryParameters.get("revision"))
            }
        }
        group.get("v1/lookup/:orderId") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.lookUpOrder(context.parameters.get("orderId") ?? "", environment: environment, bundleId: bundleId)
            }
        }
        group.post("v1/notifications/history") { request, _ in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                let body = try await Self.appleBody(NotificationHistoryRequest.self, request)
                return try await store.notifications.history(
                    bundleId: bundleId, environment: environment, request: body,
                    paginationToken: request.uri.queryParameters.get("paginationToken"))
            }
        }
        group.put("v2/transactions/consumption/:id") { request, context in
            try await self.apple(request, status: .accepted) { bundleId throws(AppleAPIError) -> Empty in
                let body = try await Self.appleBody(ConsumptionRequest.self, request)
                try await store.recordConsumption(try Self.id(context), environment: environment, bundleId: bundleId, body)
                return Empty()
            }
        }
        group.put("v1/transactions/consumption/:id") { request, context in
            try await self.apple(request, status: .accepted) { bundleId throws(AppleAPIError) -> Empty in
                let body = try await Self.appleBody(ConsumptionRequestV1.self, request)
                try await store.recordConsumptionV1(try Self.id(context), environment: environment, bundleId: bundleId, body)
                return Empty()
            }
        }
        group.put("v1/transactions/:id/appAccountToken") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) -> Empty in
                let body = try await Self.appleBody(UpdateAppAccountTokenRequest.self, request)
                try await store.setAppAccountToken(context.parameters.get("id") ?? "", environment: environment, bundleId: bundleId, body)
                return Empty()
            }
        }
        group.get("v1/transactions/appTransactions/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.appTransactionInfo(try Self.id(context), environment: environment, bundleId: bundleId)
            }
        }
        group.post("v1/transactions/:id/finish") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) -> Empty in
                try await store.finishTransaction(try Self.id(context), environment: environment, bundleId: bundleId)
                return Empty()
            }
        }
        group.put("v1/subscriptions/extend/:id") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                let body = try await Self.appleBody(ExtendRenewalDateRequest.self, request)
                let id = context.parameters.get("id") ?? ""
                guard !id.isEmpty, id.allSatisfy(\.isNumber) else {
                    throw .badRequest(4_000_008, "Invalid original transaction id.")
                }
                return try await store.extendRenewalDate(id, environment: environment, bundleId: bundleId, body)
            }
        }
        group.post("v1/notifications/test") { request, _ in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.requestTestNotification(environment: environment, bundleId: bundleId)
            }
        }
        group.get("v1/notifications/test/:token") { request, context in
            try await self.apple(request) { bundleId throws(AppleAPIError) in
                try await store.testNotificationStatus(context.parameters.get("token") ?? "", environment: environment, bundleId: bundleId)
            }
        }
    }

    struct Empty: Codable {}

    /// Authenticates, applies armed faults, runs `body`, and answers as Apple does: the
    /// JSON object, Apple's error body, or a bare 401.
    private func apple<Value: Encodable>(
        _ request: Request, status: HTTPResponse.Status = .ok,
        _ body: (String) async throws(AppleAPIError) -> Value
    ) async throws -> Response {
        let bundleId: String
        do {
            bundleId = try keys.authenticate(request.headers[.authorization])
        } catch {
            logger.debug("App Store Server API request refused", metadata: ["reason": "\(error.reason)"])
            return Response(status: .unauthorized)
        }
        if let fault = faults.take(.serverAPI, path: request.uri.path, now: store.clock.now) {
            var response = Self.appleError(
                AppleAPIError(
                    httpStatus: fault.status ?? 500, errorCode: fault.errorCode ?? (fault.status == 429 ? 4_290_000 : 5_000_000),
                    errorMessage: fault.errorMessage ?? (fault.status == 429 ? "Rate limit exceeded." : "An unknown error occurred.")))
            if fault.status == 429 {
                let retryAt = Date().addingTimeInterval(fault.retryAfterSeconds ?? 1)
                response.headers[.retryAfter] = String(AppleTimestamp(retryAt).milliseconds)
            }
            return response
        }
        do {
            let value = try await body(bundleId)
            if Value.self == Empty.self { return Response(status: status) }
            return Response.encoded(value, status: status)
        } catch {
            return Self.appleError(error)
        }
    }

    static func appleError(_ error: AppleAPIError) -> Response {
        Response.encoded(
            APIErrorResponseBody(errorCode: error.errorCode, errorMessage: error.errorMessage), status: .init(code: error.httpStatus))
    }

    static func id(_ context: BasicRequestContext) throws(AppleAPIError) -> String {
        guard let id = context.parameters.get("id"), !id.isEmpty, id.allSatisfy(\.isNumber) else { throw .invalidTransactionId }
        return id
    }

    static func appleBody<Value: Decodable>(_ type: Value.Type, _ request: Request) async throws(AppleAPIError) -> Value {
        do {
            let buffer = try await request.body.collect(upTo: maximumBody)
            return try JSONDecoder().decode(Value.self, from: Data(buffer.readableBytesView))
        } catch {
            throw .badRequest(4_000_000, "Bad request: \(describe(error)).")
        }
    }
}

struct APIErrorResponseBody: Codable {
    var errorCode: Int
    var errorMessage: String
}
