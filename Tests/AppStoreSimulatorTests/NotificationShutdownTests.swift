import AppStore
import AppStoreSimulator
import Foundation
import HTTPTestSupport
import Hummingbird
import Logging
import Testing

/// A simulator that stops sends nothing more: its shutdown cancels the delivery under way and
/// returns once nothing is being sent, so the receivers stopped after it see no connection
/// arrive while they stop (swift-nio traps on a connection accepted by a server being
/// cancelled).
@Suite struct NotificationShutdownTests {
    @Test(.timeLimit(.minutes(1))) func shutdownEndsTheDeliveryUnderWayAndSendsNothingAfter() async throws {
        let inbox = RequestLog()
        let (arrived, arrival) = AsyncStream<Void>.makeStream()
        let receiver = Router()
        receiver.post("v2") { request, _ -> Response in
            try await inbox.record(request)
            arrival.yield()
            // A receiver that never answers: the delivery stays under way until cancelled.
            try await Task.sleep(for: .seconds(3_600))
            return Response(status: .ok)
        }
        try await LoopbackServer.run(receiver) { url in
            var configuration = NotificationDispatcher.Configuration(url: url + "/v2")
            configuration.timeout = .seconds(3_600)
            let dispatcher = NotificationDispatcher(configuration: configuration, clock: SimulatedClock(), logger: Logger(label: "test"))
            func notification(_ id: String) -> OutgoingNotification {
                OutgoingNotification(
                    uuid: id, type: .oneTimeCharge, subtype: nil, signedPayload: "x.y.z", v1Body: nil, transactionId: id,
                    bundleId: "com.entitle.demo", environment: .sandbox, createdAt: Date())
            }
            await dispatcher.send(notification("1"))
            await dispatcher.send(notification("2"))
            var arrivals = arrived.makeAsyncIterator()
            await arrivals.next()
            #expect(await dispatcher.outstanding().pending == 2, "one under way, one waiting")

            await dispatcher.shutdown()
            #expect(await dispatcher.outstanding().pending == 0)
            await dispatcher.send(notification("3"))
            #expect(await dispatcher.outstanding().pending == 0, "nothing is queued after the shutdown")
            #expect(await inbox.count("/v2") == 1, "the one under way; not the one waiting")
        }
    }
}
