import AsyncHTTPClient
import Logging
import OTel
import ServiceLifecycle
import Tracing

/// OpenTelemetry tracing for one process: off unless `ENTITLE_TRACING=otlp`; then spans go
/// over OTLP/HTTP as swift-otel's OpenTelemetry variables say (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, ...; see
/// docs/operations.md, "Tracing"). Only traces: metrics stay Prometheus and logs stay on
/// standard error.
enum TracingBootstrap {
    /// Bootstraps the process's tracer when tracing is on, and returns the service that
    /// exports its spans: run it first in the process's service group, so it stops last and
    /// flushes what the others ended. `nil` when tracing is off.
    ///
    /// - Parameter role: the process's part (`api`, `worker`), its default service name
    ///   `entitle-ROLE` (`OTEL_SERVICE_NAME` wins).
    static func start(role: String, environment: [String: String], logger: Logger) throws -> (any Service)? {
        switch environment["ENTITLE_TRACING"] ?? "" {
        case "", "off": return nil
        case "otlp": break
        case let other: throw CommandFailure("ENTITLE_TRACING must be off or otlp, got '\(other)'")
        }
        if ["true", "1"].contains(environment["OTEL_SDK_DISABLED"]?.lowercased()) {
            logger.notice("tracing is off: OTEL_SDK_DISABLED is set")
            return nil
        }
        // swift-otel is built without gRPC (its trait would add minutes to every build), and
        // traps when asked for it: refuse here, with a message.
        if (environment["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] ?? environment["OTEL_EXPORTER_OTLP_PROTOCOL"]) == "grpc" {
            throw CommandFailure("OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not built in; use http/protobuf (port 4318) or http/json")
        }
        var configuration = OTel.Configuration.default
        configuration.serviceName = role.isEmpty ? "entitle" : "entitle-\(role)"
        // swift-otel logs each OTEL_ variable it reads with its value at info, and a
        // collector's key rides in OTEL_EXPORTER_OTLP_HEADERS: the values are left out.
        var diagnostics = Logger(label: "entitle.tracing") { label in
            ValuesLeftOut(wrapped: StreamLogHandler.standardError(label: label))
        }
        diagnostics.logLevel = logger.logLevel
        configuration.diagnosticLogger = .custom(diagnostics)
        // At the process's level (swift-otel sets its logger's own; OTEL_LOG_LEVEL still wins).
        configuration.diagnosticLogLevel =
            switch logger.logLevel {
            case .trace: .trace
            case .debug: .debug
            case .info, .notice: .info
            case .warning: .warning
            case .error, .critical: .error
            }
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        // AsyncHTTPClient gives each client the tracer in place when the client is made, and
        // its own request spans record whole URLs, queries included. The shared client (Apple,
        // the simulator) is made now, before the tracer: Entitle's own spans say what may be said.
        _ = HTTPClient.shared
        let backend: (tracer: any Tracer, service: any Service)
        do {
            let made = try OTel.makeTracingBackend(configuration: configuration)
            backend = (made.factory, made.service)
        } catch {
            throw CommandFailure("tracing could not start (check the OTEL_ variables): \(error)")
        }
        InstrumentationSystem.bootstrap(backend.tracer)
        logger.info(
            "tracing on: spans are exported over OTLP",
            metadata: ["service": "\(environment["OTEL_SERVICE_NAME"] ?? configuration.serviceName)"])
        return backend.service
    }
}

/// A log handler that leaves out the values swift-otel logs for the variables it read
/// (`environment_value`, `previous_value`, `new_value`): the names are enough to tell which
/// settings were taken, and a value can be a secret.
struct ValuesLeftOut: LogHandler {
    static let hidden: Set<String> = ["environment_value", "previous_value", "new_value"]
    var wrapped: any LogHandler

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue.filter { !Self.hidden.contains($0.key) } }
    }

    var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = Self.hidden.contains(key) ? nil : newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.metadata = event.metadata?.filter { !Self.hidden.contains($0.key) }
        wrapped.log(event: event)
    }
}
