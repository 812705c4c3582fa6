import AppStore
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// A notification the App Store sends: the signed V2 payload and, for the legacy road,
/// the V1 JSON body.
public struct OutgoingNotification: Sendable {
    public var uuid: String
    public var type: NotificationType
    public var subtype: NotificationSubtype?
    public var signedPayload: String
    public var v1Body: [UInt8]?
    public var transactionId: String
    public var bundleId: String
    public var environment: AppStoreEnvironment
    public var createdAt: Date

    public init(
        uuid: String, type: NotificationType, subtype: NotificationSubtype?, signedPayload: String, v1Body: [UInt8]?,
        transactionId: String, bundleId: String, environment: AppStoreEnvironment, createdAt: Date
    ) {
        self.uuid = uuid
        self.type = type
        self.subtype = subtype
        self.signedPayload = signedPayload
        self.v1Body = v1Body
        self.transactionId = transactionId
        self.bundleId = bundleId
        self.environment = environment
        self.createdAt = createdAt
    }
}

/// Delivers notifications to the configured URLs in the order they happen, retries failures
/// on Apple's schedule (1, 12, 24, 48 and 72 hours after the previous attempt; seconds by
/// default here), and records every attempt for Get Notification History.
///
/// Tests can hold deliveries and release them in reverse order (out-of-order delivery) and
/// resend a notification (a duplicate), as Apple sometimes does.
public actor NotificationDispatcher {
    public struct Configuration: Sendable {
        /// Where V2 `{"signedPayload"}` bodies go; none: recorded only.
        public var url: String?
        /// Where V1 bodies go; none: V1 is not sent.
        public var v1URL: String?
        /// Delays between attempts after a failure; Apple's hours, compressed to seconds.
        public var retryDelays: [Duration] = [.seconds(1), .seconds(12), .seconds(24), .seconds(48), .seconds(72)]
        public var timeout: Duration = .seconds(5)

        public init(url: String? = nil, v1URL: String? = nil) {
            self.url = url
            self.v1URL = v1URL
        }
    }

    /// The order `release` delivers held notifications in.
    public enum ReleaseOrder: String, Sendable, Codable {
        case sent, reversed
    }

    /// One notification and what became of it.
    public struct Record: Sendable {
        public var notification: OutgoingNotification
        public var attempts: [SendAttemptItem] = []
        public var v1Attempts: [SendAttemptItem] = []
        public var retries = 0
        public var isTest = false

        public var delivered: Bool { attempts.contains { $0.sendAttemptResult == .success } }
    }

    public private(set) var configuration: Configuration
    private let clock: SimulatedClock
    private let httpClient: HTTPClient
    private let logger: Logger
    private var records: [Record] = []
    private var index: [String: Int] = [:]
    private var ready: [(uuid: String, retry: Bool)] = []
    private var draining = false
    private var holding = false
    private var held: [String] = []
    /// Apps (or every app, `nil`) whose notifications do not reach their receiver.
    private var unreachable: Set<String?> = []
    private var timers: [UUID: Task<Void, Never>] = [:]
    /// The deliveries under way, and whether the dispatcher has shut down (it sends nothing more).
    private var drainer: Task<Void, Never>?
    private var stopped = false

    public init(configuration: Configuration, clock: SimulatedClock, httpClient: HTTPClient = .shared, logger: Logger) {
        self.configuration = configuration
        self.clock = clock
        self.httpClient = httpClient
        self.logger = logger
    }

    /// Whether V1 bodies go anywhere.
    public var sendsV1: Bool { configuration.v1URL != nil }

    /// Changes where notifications go (`POST /simulator/notifications/url`).
    public func setURLs(v2: String?, v1: String?) {
        configuration.url = v2
        configuration.v1URL = v1
    }

    /// Records a notification and queues its delivery (or holds it).
    public func send(_ notification: OutgoingNotification, isTest: Bool = false) {
        index[notification.uuid] = records.count
        var record = Record(notification: notification)
        record.isTest = isTest
        records.append(record)
        if holding { held.append(notification.uuid) } else { enqueue(notification.uuid, retry: true) }
    }

    /// Switches delivery off or on for one app (`nil`: every app). While off, a notification's
    /// attempt fails as an unreachable server's does (`NO_RESPONSE`, recorded for Get
    /// Notification History) and is not retried, as if Apple's retries had all failed too:
    /// only the history has it.
    public func setDelivery(_ enabled: Bool, bundleId: String?) {
        if enabled { unreachable.remove(bundleId) } else { unreachable.insert(bundleId) }
    }

    /// Stops delivering; notifications are recorded and kept until `release`.
    public func hold() { holding = true }

    /// Delivers the held notifications, in the order they happened or reversed, and resumes.
    @discardableResult
    public func release(order: ReleaseOrder) -> [String] {
        holding = false
        let released = order == .reversed ? held.reversed() : held
        held = []
        for uuid in released { enqueue(uuid, retry: true) }
        return released
    }

    /// Delivers a notification again, as Apple's occasional duplicates do.
    public func resend(_ uuid: String) throws {
        guard index[uuid] != nil else { throw SimulatorError(.notFound, "no notification \(uuid)") }
        enqueue(uuid, retry: false)
    }

    /// Every notification so far, oldest first.
    public func all() -> [Record] { records }

    /// Deliveries not yet attempted, under way, or waiting to be retried; and those held.
    /// `(0, 0)`: everything sent so far has reached its receiver (or failed for good).
    public func outstanding() -> (pending: Int, held: Int) {
        (ready.count + (draining ? 1 : 0) + timers.count, held.count)
    }

    public func record(_ uuid: String) -> Record? { index[uuid].map { records[$0] } }

    /// Cancels pending retries and the delivery under way, and returns once nothing is being
    /// sent (at shutdown): a receiver stopped after the simulator gets no more connections.
    public func shutdown() async {
        stopped = true
        for timer in timers.values { timer.cancel() }
        timers = [:]
        ready = []
        drainer?.cancel()
        await drainer?.value
    }

    private func enqueue(_ uuid: String, retry: Bool) {
        guard !stopped else { return }
        ready.append((uuid, retry))
        guard !draining else { return }
        draining = true
        drainer = Task { await self.drain() }
    }

    private func drain() async {
        while !ready.isEmpty, !stopped {
            let next = ready.removeFirst()
            await deliver(next.uuid, retry: next.retry)
        }
        draining = false
    }

    private func deliver(_ uuid: String, retry: Bool) async {
        guard let position = index[uuid] else { return }
        let notification = records[position].notification
        let reachable = !unreachable.contains(nil) && !unreachable.contains(notification.bundleId)
        if let url = configuration.url {
            let body = (try? JSONSerialization.data(withJSONObject: ["signedPayload": notification.signedPayload])) ?? Data()
            let result = reachable ? await post(url, body: Array(body)) : .noResponse
            var attempt = SendAttemptItem()
            attempt.attemptDate = AppleTimestamp(clock.now)
            attempt.sendAttemptResult = result
            records[position].attempts.append(attempt)
            if result != .success, retry, reachable, !stopped, records[position].retries < configuration.retryDelays.count {
                let delay = configuration.retryDelays[records[position].retries]
                records[position].retries += 1
                let id = UUID()
                timers[id] = Task {
                    try? await Task.sleep(for: delay)
                    await self.retryFired(id, uuid)
                }
                logger.info("notification delivery failed; retrying", metadata: ["uuid": "\(uuid)", "result": "\(result.rawValue)"])
            }
        }
        if let url = configuration.v1URL, let body = notification.v1Body, !stopped {
            var attempt = SendAttemptItem()
            attempt.sendAttemptResult = reachable ? await post(url, body: body) : .noResponse
            attempt.attemptDate = AppleTimestamp(clock.now)
            records[position].v1Attempts.append(attempt)
        }
    }

    private func retryFired(_ id: UUID, _ uuid: String) {
        guard timers.removeValue(forKey: id) != nil, !Task.isCancelled else { return }
        enqueue(uuid, retry: true)
    }

    private func post(_ url: String, body: [UInt8]) async -> SendAttemptResult {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "App Store Notification Simulator")
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await httpClient.execute(request, timeout: .init(configuration.timeout))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return (200...206).contains(Int(response.status.code))
                ? .success : SendAttemptResult(rawValue: "UNSUCCESSFUL_HTTP_RESPONSE_CODE")
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            return .timedOut
        } catch {
            return .noResponse
        }
    }

    // MARK: Get Notification History

    /// Get Notification History for one app and environment, 20 per page.
    public func history(
        bundleId: String, environment: AppStoreEnvironment, request: NotificationHistoryRequest, paginationToken: String?
    ) throws(AppleAPIError) -> NotificationHistoryResponse {
        // Apple's checks, as its pages name them: StartDateAfterEndDateError,
        // StartDateTooFarInPastError (180 days, 30 in the sandbox), MultipleFiltersSuppliedError,
        // InvalidNotificationTypeError (a subtype without its type).
        guard request.startDate < request.endDate else {
            throw .badRequest(4_000_013, "Invalid request. The end date precedes the start date or the dates are the same.")
        }
        let kept: Double = environment == .sandbox ? 30 : 180
        guard request.startDate.date > clock.now.addingTimeInterval(-kept * 86_400) else {
            throw .badRequest(4_000_012, "Invalid request. The start date is earlier than the allowed start date.")
        }
        guard request.transactionId == nil || (request.notificationType == nil && request.notificationSubtype == nil) else {
            throw .badRequest(4_000_019, "Invalid request. Only one of transactionId or notificationType may be given.")
        }
        guard request.notificationSubtype == nil || request.notificationType != nil else {
            throw .badRequest(4_000_018, "Invalid request. The notification subtype needs its notification type.")
        }
        let matching = records.filter { record in
            let notification = record.notification
            let created = AppleTimestamp(notification.createdAt)
            return notification.bundleId == bundleId && notification.environment == environment && !record.attempts.isEmpty
                && created >= request.startDate && created < request.endDate
                && (request.notificationType.map { $0 == notification.type } ?? true)
                && (request.notificationSubtype.map { $0 == notification.subtype } ?? true)
                && (request.transactionId.map { $0 == notification.transactionId } ?? true)
                && (request.onlyFailures != true || !record.delivered)
        }
        var start = 0
        if let paginationToken, !paginationToken.isEmpty {
            guard let data = Data(base64Encoded: paginationToken), let text = String(data: data, encoding: .utf8),
                let offset = Int(text), offset >= 0, offset <= matching.count
            else { throw .invalidPaginationToken }
            start = offset
        }
        let end = min(matching.count, start + 20)
        var response = NotificationHistoryResponse()
        response.hasMore = end < matching.count
        response.paginationToken = response.hasMore == true ? Data(String(end).utf8).base64EncodedString() : nil
        response.notificationHistory = matching[start..<end].map { record in
            var item = NotificationHistoryResponseItem()
            item.signedPayload = record.notification.signedPayload
            item.sendAttempts = record.attempts
            return item
        }
        return response
    }
}
