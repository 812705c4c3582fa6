import AppStore
import EntitleCore
import Entitlements
import Foundation
import Hummingbird
import JobQueue

extension EntitleAPI {
    /// The largest notification body taken. Apple's V1 bodies carry the latest receipt and its
    /// transactions (a real one of a long subscription is 50 KB); V2 bodies are one JWS of a
    /// few KB (18 KB for the largest real one).
    static let notificationBodyLimit = 512 << 10
    static let signedPayloadLimit = 64 << 10

    func registerNotifications(on routes: RouteTable) {
        // App Store Server Notifications, V2 and V1. Apple sends no credential: a V2 payload is
        // verified here (Apple's signature) and a V1 body's password checked against the app's
        // shared secret, before anything is written. The route spends no publisher's budget;
        // refused bodies spend the sending address's budget for failures.
        routes.add(.post, "/v1/notifications/apple/{publisherId}") { request, context in
            try refuseIfFailingTooOften(context)
            let id = try RequestInput.path(context, "publisherId")
            guard let publisher = settings.catalog.publisher(id) else {
                throw failedAuthentication(context, APIError.notFound("no publisher \(id)"))
            }
            do {
                let (payload, key) = try await admitNotification(request, publisher: publisher)
                // Apple's retries of one notification find the same job: its id names the notification.
                let result = try await enqueue(
                    try EnqueueRequest(payload, queue: configuration.queue, id: JobPayloads.Notification.jobId(key)))
                return JSONBody.jobId(result.id, status: .ok)
            } catch let error as APIError where error.status == .badRequest || error.status == .contentTooLarge {
                throw failedAuthentication(context, error)
            }
        }
    }

    /// Reads and verifies a notification: the job payload to queue and what identifies it (a V2
    /// notification's UUID, a V1 body's digest).
    func admitNotification(_ request: Request, publisher: Publisher) async throws -> (JobPayloads.Notification, String) {
        let body = try await RequestInput.body(request, limit: Self.notificationBodyLimit)
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            throw APIError.badRequest("the body is not a JSON object")
        }
        if let signedPayload = object["signedPayload"] {
            guard let signedPayload = signedPayload as? String, !signedPayload.isEmpty else {
                throw APIError.badRequest("signedPayload must be a string")
            }
            guard signedPayload.utf8.count <= Self.signedPayloadLimit else {
                throw APIError(.contentTooLarge, "bodyTooLarge", "signedPayload is larger than \(Self.signedPayloadLimit) bytes")
            }
            let notification: NotificationPayload
            do {
                notification = try await settings.verifyNotification(signedPayload, publisher: publisher)
            } catch {
                switch error.code {
                case .revocationCheckFailed, .serverUnavailable:
                    // Apple sends it again later.
                    throw APIError(.serviceUnavailable, "appleUnavailable", error.message)
                default:
                    throw APIError.badRequest("signedPayload is not a valid App Store notification: \(error.message)")
                }
            }
            // Apple-signed is not enough: a signed transaction or renewal info posted here is
            // Apple's too. A notification names its type and carries its UUID.
            guard notification.notificationType != nil, let uuid = notification.notificationUUID, !uuid.isEmpty, uuid.utf8.count <= 64
            else {
                throw APIError.badRequest("signedPayload is Apple-signed but not a notification (no notificationType and notificationUUID)")
            }
            return (JobPayloads.Notification(publisher: publisher.id, signedPayload: signedPayload), uuid)
        }
        guard object["notification_type"] is String else {
            throw APIError.badRequest("expected a V2 notification {\"signedPayload\"} or a V1 one with notification_type")
        }
        // V1: unsigned; the app's shared secret in `password` is the only sign it is Apple's.
        guard let bundleId = object["bid"] as? String, publisher.app(bundleId: bundleId) != nil else {
            throw APIError.badRequest("the V1 notification's bid names no app of publisher \(publisher.id)")
        }
        let secrets = credentials.current.sharedSecrets[publisher.id]?[bundleId] ?? []
        guard !secrets.isEmpty else {
            throw APIError.badRequest("V1 notifications for \(bundleId) need the app's shared secret in the configuration")
        }
        guard let password = object["password"] as? String, ConstantTime.matchesAny(password, secrets) else {
            throw APIError.badRequest("the V1 notification's password is not the app's shared secret")
        }
        // Queued without the secret: job payloads are shown to operators.
        var stripped = object
        stripped["password"] = nil
        guard let text = try? JSONSerialization.data(withJSONObject: stripped, options: [.sortedKeys]) else {
            throw APIError.badRequest("the V1 notification cannot be read")
        }
        let payload = JobPayloads.Notification(publisher: publisher.id, v1: String(decoding: text, as: UTF8.self))
        return (payload, Self.digest(payload.v1 ?? ""))
    }
}
