import AppStore
import Entitlements
import Foundation
import Hummingbird
import JobQueue
import Worker

extension EntitleAPI {
    func registerNotifications(on routes: RouteTable) {
        // App Store Server Notifications, V2 and V1. Apple sends no token: the V2 payload is
        // verified here and again by the worker; a V1 body's password is checked by the worker.
        routes.add(.post, "/v1/notifications/apple/{publisherId}") { request, context in
            let id = try RequestInput.path(context, "publisherId")
            guard let publisher = settings.catalog.publisher(id) else { throw APIError.notFound("no publisher \(id)") }
            try limit(publisher)
            let body = try await RequestInput.body(request, limit: configuration.maxBodyBytes)
            guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
                throw APIError.badRequest("the body is not a JSON object")
            }
            let payload: JobPayloads.Notification
            let key: String
            if let signedPayload = object["signedPayload"] {
                guard let signedPayload = signedPayload as? String, !signedPayload.isEmpty else {
                    throw APIError.badRequest("signedPayload must be a string")
                }
                let notification: NotificationPayload
                do {
                    notification = try await settings.verifyNotification(signedPayload, publisher: publisher)
                } catch let error as AppStoreError {
                    switch error.code {
                    case .revocationCheckFailed, .serverUnavailable:
                        // Apple sends it again later.
                        throw APIError(.serviceUnavailable, "appleUnavailable", error.message)
                    default:
                        throw APIError.badRequest("signedPayload is not a valid App Store notification: \(error.message)")
                    }
                } catch {
                    throw APIError.badRequest("signedPayload is not a valid App Store notification")
                }
                payload = JobPayloads.Notification(publisher: publisher.id, signedPayload: signedPayload)
                key = "notification:" + (notification.notificationUUID ?? Self.digest(signedPayload))
            } else if object["notification_type"] is String {
                payload = JobPayloads.Notification(publisher: publisher.id, v1: String(decoding: body, as: UTF8.self))
                key = "notification:" + Self.digest(payload.v1 ?? "")
            } else {
                throw APIError.badRequest("expected a V2 notification {\"signedPayload\"} or a V1 one with notification_type")
            }
            // Apple's retries of one notification find the same job.
            let result = try await enqueue(
                EnqueueRequest(
                    type: "notification", payload: JobPayloads.encode(payload), queue: configuration.queue, idempotencyKey: key))
            return JSONBody.jobId(result.id, status: .ok)
        }
    }
}
