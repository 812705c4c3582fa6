import Foundation
import Synchronization

/// Failures tests and load runs ask for: the next matching requests to Apple's endpoints
/// answer a chosen error instead (a 429 with Retry-After, 4040010, a 503, a verifyReceipt
/// status such as 21005).
public final class FaultInjector: Sendable {
    /// `POST /simulator/faults`.
    public struct Fault: Codable, Sendable, Hashable {
        public enum Target: String, Codable, Sendable {
            case serverAPI, verifyReceipt
        }

        public var target: Target
        /// The HTTP status to answer.
        public var status: Int?
        /// App Store Server API `errorCode` (with `status`).
        public var errorCode: Int?
        public var errorMessage: String?
        /// verifyReceipt `status` (HTTP 200 with this status).
        public var receiptStatus: Int?
        /// 429: `Retry-After` is now plus this many seconds, as a UNIX time in milliseconds.
        public var retryAfterSeconds: Double?
        /// Only requests whose path contains this.
        public var pathContains: String?
        /// How many requests fail (1 by default).
        public var count: Int?
        /// Instead of a count: every matching request fails for this many seconds of the
        /// simulator's clock from when the fault is added (an outage).
        public var forSeconds: Double?

        public init(target: Target) { self.target = target }
    }

    private let faults = Mutex<[(fault: Fault, remaining: Int, until: Date?)]>([])

    public init() {}

    public func add(_ fault: Fault, now: Date = Date()) throws {
        if let seconds = fault.forSeconds, !(seconds > 0 && seconds <= 30 * 86_400) {
            throw SimulatorError(.invalidRequest, "forSeconds must be more than 0 and at most 30 days")
        }
        guard (fault.count ?? 1) >= 1, (fault.count ?? 1) <= 1_000_000 else {
            throw SimulatorError(.invalidRequest, "count must be 1 to 1000000")
        }
        switch fault.target {
        case .serverAPI:
            guard let status = fault.status, (400...599).contains(status) else {
                throw SimulatorError(.invalidRequest, "a serverAPI fault needs an HTTP status from 400 to 599")
            }
        case .verifyReceipt:
            guard fault.receiptStatus != nil || (fault.status.map { (400...599).contains($0) } ?? false) else {
                throw SimulatorError(.invalidRequest, "a verifyReceipt fault needs a receiptStatus or an HTTP status from 400 to 599")
            }
        }
        faults.withLock { $0.append((fault, fault.count ?? 1, fault.forSeconds.map { now.addingTimeInterval($0) })) }
    }

    /// The fault for this request, if one is armed; each use counts down.
    func take(_ target: Fault.Target, path: String, now: Date = Date()) -> Fault? {
        faults.withLock { faults in
            // An outage that has ended is gone.
            faults.removeAll { $0.until.map { now >= $0 } ?? false }
            guard
                let position = faults.firstIndex(where: { $0.fault.target == target && ($0.fault.pathContains.map(path.contains) ?? true) })
            else { return nil }
            let fault = faults[position].fault
            guard faults[position].until == nil else { return fault }
            faults[position].remaining -= 1
            if faults[position].remaining == 0 { faults.remove(at: position) }
            return fault
        }
    }

    public func clear() { faults.withLock { $0 = [] } }
}
