import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import JobQueue
import Logging
import Worker

/// The HTTP API: purchases in, jobs and entitlements out, App Store notifications, and the
/// operators' routes and dashboard. Stateless: run as many instances as needed behind a
/// load balancer, all on the same Redis.
///
/// Domain and queue errors are mapped to HTTP here and nowhere else.
public struct EntitleAPI: Sendable {
    public struct Configuration: Sendable {
        /// The queue purchases, transfers and notifications go to.
        public var queue = "default"
        /// The largest request body taken, in bytes (413 above it).
        public var maxBodyBytes = 1 << 20
        /// The longest a request may wait for a job (`?wait=`, `/v1/validate`).
        public var maxWait: Duration = .seconds(30)
        /// The operators' token for the dashboard's routes; `nil` turns them off.
        public var adminToken: String?
        /// The rate for publishers whose catalog entry sets none.
        public var defaultRateLimit: (perSecond: Double, burst: Int) = (100, 200)

        public init() {}
    }

    let settings: EntitleConfiguration
    let jobQueue: JobQueue
    /// Enqueues share round trips under load.
    let batcher: EnqueueBatcher
    let store: EntitlementStore
    let credentials: APICredentials
    let configuration: Configuration
    let limiter = RateLimiter()
    let metrics: (@Sendable () async -> [UInt8])?
    let logger: Logger

    /// - Parameters:
    ///   - environment: where the catalog's secret variables (tokens) are read.
    ///   - metrics: renders `GET /metrics` (Prometheus text); `nil` answers 404.
    public init(
        settings: EntitleConfiguration, jobQueue: JobQueue, configuration: Configuration = .init(), environment: [String: String],
        metrics: (@Sendable () async -> [UInt8])? = nil, logger: Logger
    ) throws(APIConfigurationError) {
        self.settings = settings
        self.jobQueue = jobQueue
        self.batcher = EnqueueBatcher(jobQueue: jobQueue)
        self.store = EntitlementStore(redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, logger: logger)
        self.credentials = try APICredentials(catalog: settings.catalog, environment: environment, adminToken: configuration.adminToken)
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
    }

    /// Every route, as `METHOD /path/{parameter}` (the OpenAPI document's spelling).
    public var routes: [String] {
        let table = RouteTable(router: Router())
        register(on: table)
        return table.names
    }

    /// The router with every route.
    public func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: MetricsMiddleware())
        router.add(middleware: FaultMiddleware(logger: logger))
        register(on: RouteTable(router: router))
        return router
    }

    func register(on table: RouteTable) {
        registerPurchases(on: table)
        registerCleeng(on: table)
        registerReading(on: table)
        registerNotifications(on: table)
        registerOperations(on: table)
        registerDashboard(on: table)
    }

    // MARK: Auth

    /// The publisher whose Bearer token this request carries, within its rate limit.
    func publisher(_ request: Request, token alternative: String? = nil) throws -> Publisher {
        guard let token = Self.bearer(request) ?? alternative else {
            throw APIError.unauthorized("send Authorization: Bearer <publisher token>")
        }
        guard let id = credentials.publisher(bearer: token), let publisher = settings.catalog.publisher(id) else {
            throw APIError.unauthorized("the token is not valid")
        }
        try limit(publisher)
        return publisher
    }

    /// Refuses with 429 and `Retry-After` when the publisher is over its rate.
    func limit(_ publisher: Publisher) throws {
        let rate = publisher.api?.rateLimit.map { ($0.perSecond, $0.burst) } ?? configuration.defaultRateLimit
        guard let wait = limiter.take(publisher.id, perSecond: rate.0, burst: rate.1) else { return }
        let seconds = max(1, Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up)))
        var error = APIError(
            .tooManyRequests, "rateLimited",
            "publisher \(publisher.id) is over its rate limit of \(Self.format(rate.0)) requests per second; retry in \(seconds) s")
        error.headers[.retryAfter] = String(seconds)
        throw error
    }

    /// Operators: the admin token.
    func requireAdmin(_ request: Request) throws {
        guard credentials.hasAdminToken else {
            throw APIError(.forbidden, "adminDisabled", "operator routes are off: start the API with ENTITLE_ADMIN_TOKEN set")
        }
        guard let token = Self.bearer(request) else { throw APIError.unauthorized("send Authorization: Bearer <admin token>") }
        guard credentials.isAdmin(bearer: token) else { throw APIError.unauthorized("the admin token is not valid") }
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

    // MARK: Shared steps

    /// The App Store's "now" (the simulator's clock in development).
    func now() async throws -> Date {
        do {
            return try await settings.clock.now()
        } catch {
            throw APIError(.serviceUnavailable, "appleUnavailable", "the App Store clock cannot be read: \(error)")
        }
    }

    /// Waits until the job has finished or `timeout` has passed; the record as it then is.
    func waitForJob(_ id: String, timeout: Duration) async throws -> JobRecord? {
        let deadline = ContinuousClock.now + timeout
        var interval = Duration.milliseconds(10)
        while true {
            let record = try await jobQueue.job(id: id, queue: configuration.queue)
            guard let record, !record.status.isFinished else { return record }
            let remaining = deadline - .now
            if remaining <= .zero { return record }
            try await Task.sleep(for: min(interval, remaining))
            interval = min(interval * 2, .milliseconds(200))
        }
    }

    /// Enqueues, mapping the queue's refusals to HTTP.
    func enqueue(_ request: EnqueueRequest) async throws -> EnqueueResult {
        do {
            return try await batcher.enqueue(request)
        } catch let error as JobQueueError {
            throw APIError.badRequest(error.message)
        }
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

/// Registers routes on a router and remembers their names (`GET /v1/jobs/{id}`).
final class RouteTable: @unchecked Sendable {
    // Used from one task while routes are registered, never after: no lock needed.
    let router: Router<BasicRequestContext>
    private(set) var names: [String] = []

    init(router: Router<BasicRequestContext>) { self.router = router }

    func add(
        _ method: HTTPRequest.Method, _ path: String,
        _ handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Response
    ) {
        names.append("\(method.rawValue) \(path)")
        let hummingbirdPath = path.split(separator: "/").map { part in
            part.hasPrefix("{") && part.hasSuffix("}") ? ":" + part.dropFirst().dropLast() : part
        }.joined(separator: "/")
        router.on(RouterPath("/" + hummingbirdPath), method: method, use: handler)
    }
}
