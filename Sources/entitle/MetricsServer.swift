import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle

/// The worker's metrics port: `GET /metrics` in Prometheus text format.
enum MetricsServer {
    static func make(registry: PrometheusCollectorRegistry, host: String, port: Int, logger: Logger) -> some Service {
        let router = Router()
        router.get("metrics") { _, _ -> Response in
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: buffer))
            )
        }
        router.get("healthz") { _, _ in "ok" }
        return Application(router: router, configuration: .init(address: .hostname(host, port: port)), logger: logger)
    }
}
