import DurationUnits
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird

/// Who is calling, once authenticated.
///
/// - a **secret key** (the publisher's backend): everything the publisher may do;
/// - an **app key** (shipped inside an app, so public): purchases that carry Apple's proof,
///   and, with a customer token, reads about that one customer and the jobs this key created;
/// - the **admin token** (operators): the queues, the dead sets, any customer.
enum Caller: Sendable {
    case secretKey(Publisher)
    /// `customer` is the one a valid `X-Customer-Token` names, if the app sent one.
    case app(Publisher, key: Publisher.APIAccess.AppKey, customer: String?)
    case admin
}

extension EntitleAPI {
    /// Authenticates the request's Bearer key (or `alternative`, for clients that cannot set
    /// headers), checks its customer token, and spends one request of its budget.
    ///
    /// A refused authentication spends the client address's budget for failures, never a
    /// publisher's: once it is spent, refusals from that address are 429 instead of 401.
    /// Requests that authenticate are never refused for their address.
    func caller(_ request: Request, _ context: APIRequestContext, token alternative: String? = nil) throws -> Caller {
        guard let token = Self.bearer(request) ?? alternative else {
            throw failedAuthentication(context, APIError.unauthorized("send Authorization: Bearer <key>"))
        }
        let credentials = credentials.current
        let caller: Caller
        switch credentials.holder(bearer: token) {
        case .secretKey(let id)?:
            guard let publisher = settings.catalog.publisher(id) else { throw failedAuthentication(context, Self.invalidKey) }
            try limit("publisher:" + publisher.id, publisher)
            caller = .secretKey(publisher)
        case .appKey(let id, let keyId)?:
            guard let publisher = settings.catalog.publisher(id), let key = publisher.api?.appKeys.first(where: { $0.id == keyId }) else {
                throw failedAuthentication(context, Self.invalidKey)
            }
            var customer: String?
            if let header = HTTPField.Name("X-Customer-Token"), let presented = request.headers[header] {
                do {
                    customer = publisher.canonicalCustomerId(
                        try CustomerToken.verify(
                            presented, publisher: publisher, keys: credentials.customerTokenKeys[publisher.id] ?? []
                        ).customer)
                } catch {
                    throw failedAuthentication(context, APIError(.unauthorized, "invalidCustomerToken", error.message))
                }
            }
            // Apps have a budget of their own: a noisy app cannot starve its publisher's backend.
            try limit("app:" + publisher.id, publisher)
            caller = .app(publisher, key: key, customer: customer)
        case .admin?:
            caller = .admin
        case nil:
            throw failedAuthentication(context, Self.invalidKey)
        }
        return caller
    }

    static let invalidKey = APIError.unauthorized("the key is not valid")

    /// The publisher a secret key belongs to; other callers are refused (403).
    func secretKeyPublisher(_ request: Request, _ context: APIRequestContext, token alternative: String? = nil) throws -> Publisher {
        switch try caller(request, context, token: alternative) {
        case .secretKey(let publisher): return publisher
        case .app: throw APIError(.forbidden, "forbidden", "this route takes the publisher's secret key (from its backend), not an app key")
        case .admin: throw APIError(.forbidden, "forbidden", "this route takes a publisher's secret key, not the admin token")
        }
    }

    /// Operators: the admin token.
    func requireAdmin(_ request: Request, _ context: APIRequestContext) throws {
        guard credentials.current.hasAdminToken else {
            throw APIError(.forbidden, "adminDisabled", "operator routes are off: start the API with ENTITLE_ADMIN_TOKEN set")
        }
        guard case .admin = try caller(request, context) else {
            throw APIError(.forbidden, "forbidden", "operator routes take the admin token")
        }
    }

    /// Whether `caller` may read about `customer` of its publisher: a secret key may; an app
    /// key only with a customer token for that very customer. Returns the publisher and the
    /// customer's id as stored (`Publisher.canonicalCustomerId`).
    func requireCustomerAccess(_ caller: Caller, customer named: String) throws -> (Publisher, String) {
        switch caller {
        case .secretKey(let publisher): return (publisher, publisher.canonicalCustomerId(named))
        case .app(let publisher, _, let tokenCustomer):
            guard let tokenCustomer else {
                throw APIError(
                    .unauthorized, "customerTokenRequired", "an app key reads about a customer only with that customer's X-Customer-Token")
            }
            let customer = publisher.canonicalCustomerId(named)
            guard tokenCustomer == customer else {
                throw APIError(.forbidden, "forbidden", "the customer token is for another customer")
            }
            return (publisher, customer)
        case .admin:
            throw APIError(.forbidden, "forbidden", "operators read customers at /v1/admin/publishers/{publisherId}/customers/{id}")
        }
    }

    /// Refuses with 429 and `Retry-After` when the publisher (or its apps) is over its rate.
    func limit(_ key: String, _ publisher: Publisher) throws {
        let rate = publisher.api?.rateLimit.map { ($0.perSecond, $0.burst) } ?? configuration.defaultRateLimit
        guard let wait = limiter.take(key, perSecond: rate.0, burst: rate.1) else { return }
        throw Self.tooManyRequests(
            "publisher \(publisher.id) is over its rate limit of \(Self.format(rate.0)) requests per second", wait: wait)
    }

    /// 429 before any check, for a client address that has spent its failures: routes that
    /// verify something costly for anyone (notifications) call it first.
    func refuseIfFailingTooOften(_ context: APIRequestContext) throws {
        let rate = configuration.failedAuthenticationLimit
        guard let wait = failures.wait("address:" + context.clientAddress, perSecond: rate.perSecond, burst: rate.burst) else { return }
        throw Self.tooManyRequests("too many refused requests from this address", wait: wait)
    }

    /// Spends one of the client address's failures; returns `error` to throw, or 429 when the
    /// address had none left.
    func failedAuthentication(_ context: APIRequestContext, _ error: APIError) -> APIError {
        let rate = configuration.failedAuthenticationLimit
        guard let wait = failures.take("address:" + context.clientAddress, perSecond: rate.perSecond, burst: rate.burst) else {
            return error
        }
        return Self.tooManyRequests("too many refused requests from this address", wait: wait)
    }

    static func tooManyRequests(_ message: String, wait: Duration) -> APIError {
        let seconds = max(1, Int(wait.components.seconds) + (wait.components.attoseconds > 0 ? 1 : 0))
        var error = APIError(.tooManyRequests, "rateLimited", "\(message); retry in \(seconds) s")
        error.headers[.retryAfter] = String(seconds)
        return error
    }

    static func bearer(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let bytes = Array(header.utf8)
        // "Bearer " in any case, then the token without surrounding spaces.
        guard bytes.count > 7, bytes[6] == 0x20, String(decoding: bytes[0..<6], as: UTF8.self).lowercased() == "bearer" else { return nil }
        var token = bytes[7...]
        while token.first == 0x20 { token = token.dropFirst() }
        while token.last == 0x20 { token = token.dropLast() }
        return token.isEmpty ? nil : String(decoding: token, as: UTF8.self)
    }
}
