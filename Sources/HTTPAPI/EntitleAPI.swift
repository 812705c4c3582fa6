import EntitleCore
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import JobQueue
import Logging

/// The HTTP API: purchases in, jobs and entitlements out, App Store notifications, and the
/// operators' routes and dashboard. Stateless: run as many instances as needed behind a
/// load balancer, all on the same Redis.
///
/// Domain and queue errors are mapped to HTTP here and nowhere else. Who may call which
/// route: `Caller`, and the table in docs/api.md.
package struct EntitleAPI: Sendable {
    package struct Configuration: Sendable {
        /// The queue purchases, transfers and notifications go to.
        package var queue = "default"
        /// The largest request body taken, in bytes (413 above it).
        package var maxBodyBytes = 1 << 20
        /// The longest a request may wait for a job (`?wait=`, `/v1/validate`).
        package var maxWait: Duration = .seconds(30)
        /// The rate for publishers whose catalog entry sets none.
        package var defaultRateLimit: (perSecond: Double, burst: Int) = (100, 200)
        /// Refused authentications (and refused notifications) per client address: once a
        /// client spends these, it gets 429 before anything is checked.
        package var failedAuthenticationLimit: (perSecond: Double, burst: Int) = (20, 100)
        /// How long a new connection may take to send its first request head, whole.
        package var headerTimeout: Duration = .seconds(10)
        /// How long a request may take from its head to the end of its body.
        package var requestTimeout: Duration = .seconds(30)
        /// How long a keep-alive connection may stay idle between a response and the next
        /// request's head: longer than clients' connection pools keep idle connections
        /// (AsyncHTTPClient 60 s), so a pooled connection is not closed as it is reused.
        package var idleTimeout: Duration = .seconds(75)
        /// Connections served at once; more wait in the kernel's backlog.
        package var maxConnections = 8192

        package init() {}
    }

    let settings: EntitleConfiguration
    let jobQueue: JobQueue
    /// Enqueues share round trips under load.
    let batcher: EnqueueBatcher
    /// Long-polls wake when their job ends.
    let waiter: JobWaiter
    let store: EntitlementStore
    let credentials: Reloadable<APICredentials>
    let configuration: Configuration
    /// Publishers' and apps' budgets.
    let limiter = RateLimiter()
    /// Client addresses' budgets for refused authentications and notifications.
    let failures = RateLimiter()
    let metrics: (@Sendable () async -> [UInt8])?
    let logger: Logger

    /// - Parameters:
    ///   - metrics: renders `GET /metrics` (Prometheus text); `nil` answers 404.
    package init(
        settings: EntitleConfiguration, jobQueue: JobQueue, configuration: Configuration = .init(),
        metrics: (@Sendable () async -> [UInt8])? = nil, logger: Logger
    ) throws(APIConfigurationError) {
        self.settings = settings
        self.jobQueue = jobQueue
        self.batcher = EnqueueBatcher(jobQueue: jobQueue)
        self.waiter = JobWaiter(jobQueue: jobQueue, logger: logger)
        self.store = EntitlementStore(
            redis: jobQueue.redis, prefix: jobQueue.configuration.prefix, format: settings.customerFormat,
            eventFormat: settings.eventFormat, logger: logger)
        do {
            self.credentials = try Reloadable { try APICredentials(settings: settings) }
        } catch let error as APIConfigurationError {
            throw error
        } catch {
            throw APIConfigurationError("\(error)")
        }
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
    }

    /// Reads the credentials again (secret files may have changed: a rotation). On failure
    /// the credentials in use stay.
    package func reloadCredentials() throws { try credentials.reload() }

    /// Every route, as `METHOD /path/{parameter}` (the OpenAPI document's spelling).
    package var routes: [String] {
        let table = RouteTable(router: Router(context: APIRequestContext.self))
        register(on: table)
        return table.names
    }

    /// The router with every route.
    package func makeRouter() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // Outermost: the span covers the others and sees the answer they make.
        router.add(middleware: RequestTracingMiddleware())
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
        registerCredits(on: table)
        registerAppAccountToken(on: table)
        registerConsumptionConsent(on: table)
        registerResync(on: table)
        registerImports(on: table)
        registerPush(on: table)
        EventsController(api: self).addRoutes(to: table)
        ReportsController(api: self).addRoutes(to: table)
        registerDashboard(on: table)
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

    /// Waits until the job has finished or `timeout` has passed, woken by the worker that
    /// finished it (`JobWaiter`); the record as it then is.
    func waitForJob(_ id: String, timeout: Duration) async throws -> JobRecord? {
        try await waiter.wait(for: id, queue: configuration.queue, timeout: timeout)
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
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// Registers routes on a router and remembers their names (`GET /v1/jobs/{id}`).
final class RouteTable: @unchecked Sendable {
    // Used from one task while routes are registered, never after: no lock needed.
    let router: Router<APIRequestContext>
    private(set) var names: [String] = []

    init(router: Router<APIRequestContext>) { self.router = router }

    func add(
        _ method: HTTPRequest.Method, _ path: String,
        _ handler: @escaping @Sendable (Request, APIRequestContext) async throws -> Response
    ) {
        names.append("\(method.rawValue) \(path)")
        let hummingbirdPath = path.split(separator: "/").map { part in
            part.hasPrefix("{") && part.hasSuffix("}") ? ":" + part.dropFirst().dropLast() : part
        }.joined(separator: "/")
        router.on(RouterPath("/" + hummingbirdPath), method: method, use: handler)
    }
}
