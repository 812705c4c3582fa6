import Tracing

/// How a job carries the trace of whoever enqueued it to the worker that runs it: the
/// producer's span context as a W3C `traceparent` in the job record (field `traceparent`),
/// read back by the `start` script and made the parent of the job's spans.
///
/// Everything goes through the process's instrument (`InstrumentationSystem`): with tracing
/// off (the default, a no-op instrument) nothing is written and nothing is read.
package enum JobTracing {
    /// Whether the process traces: a tracer other than the no-op one was bootstrapped.
    package static var isOn: Bool { !(InstrumentationSystem.tracer is NoOpTracer) }

    /// The `traceparent` of the current span, or `nil` when there is none (or tracing is off).
    package static func currentTraceparent() -> String? {
        guard let context = InstrumentationContext.current else { return nil }
        var carrier: [String: String] = [:]
        InstrumentationSystem.instrument.inject(context, into: &carrier, using: TraceCarrier())
        return carrier["traceparent"].flatMap { isTraceparent($0) ? $0 : nil }
    }

    /// The context a job's spans descend from: the producer's, when the job carries one.
    package static func parentContext(traceparent: String?) -> InstrumentationContext {
        var context = InstrumentationContext.topLevel
        guard let traceparent, !traceparent.isEmpty else { return context }
        InstrumentationSystem.instrument.extract(["traceparent": traceparent], into: &context, using: TraceCarrier())
        return context
    }

    /// Whether `value` has the form of a W3C traceparent (`00-<32 hex>-<16 hex>-<2 hex>`, or a
    /// later version's longer form): only that is stored in a job record.
    package static func isTraceparent(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count >= 55, bytes.count <= 128, bytes[2] == 0x2D, bytes[35] == 0x2D, bytes[52] == 0x2D else { return false }
        func isHex(_ byte: UInt8) -> Bool { (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) }
        for (index, byte) in bytes.enumerated() where index != 2 && index != 35 && index != 52 {
            if index >= 55 {
                // A later version may append fields after a dash; nothing but these characters.
                guard isHex(byte) || byte == 0x2D else { return false }
            } else if !isHex(byte) {
                return false
            }
        }
        return bytes.count == 55 || bytes[55] == 0x2D
    }

    /// Runs `body` in a producer span when a trace is running (`InstrumentationContext.current`),
    /// with each request that names no `traceparent` given the span's. Without a running trace
    /// (a background loop, a command, tracing off) it adds nothing: such jobs start traces of
    /// their own in the worker.
    static func withEnqueueSpan<Result>(
        _ requests: [EnqueueRequest], _ body: ([EnqueueRequest]) async throws -> Result
    ) async throws -> Result {
        guard InstrumentationContext.current != nil, let first = requests.first else { return try await body(requests) }
        let oneType = requests.allSatisfy { $0.type == first.type }
        return try await withSpan(oneType ? "job.enqueue \(first.type)" : "job.enqueue", ofKind: .producer) { span in
            if span.isRecording {
                var values = attributes(type: oneType ? first.type : "mixed", queue: first.queue)
                values["messaging.operation.type"] = "send"
                values["messaging.batch.message_count"] = requests.count
                span.attributes = values
            }
            guard let traceparent = currentTraceparent() else { return try await body(requests) }
            return try await body(
                requests.map { request in
                    var request = request
                    if request.traceparent == nil { request.traceparent = traceparent }
                    return request
                })
        }
    }

    /// Runs `body` in a span that is ended when it returns. A thrown error marks the span
    /// failed with its code (a `JobFailure`'s) or its type's name (`error.type`), never its
    /// message: messages can carry URLs and other text no span should.
    package static func withSpan<Result>(
        _ name: String, context: InstrumentationContext? = nil, ofKind kind: SpanKind = .internal,
        _ body: (any Span) async throws -> Result
    ) async throws -> Result {
        let span = startSpan(name, context: context ?? InstrumentationContext.current ?? .topLevel, ofKind: kind)
        defer { span.end() }
        do {
            return try await InstrumentationContext.$current.withValue(span.context) { try await body(span) }
        } catch {
            span.attributes["error.type"] = (error as? JobFailure)?.code ?? "\(type(of: error))"
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    /// A span's start or end at a time in milliseconds since 1970 (a job's enqueue time).
    static func instant(millisecondsSinceEpoch milliseconds: Int64) -> DefaultTracerClock.Timestamp {
        DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: UInt64(max(0, milliseconds)) * 1_000_000)
    }

    /// The job's attributes on its spans: what it is and where, never its payload.
    static func attributes(type: String, queue: String, id: String? = nil, attempt: Int? = nil) -> SpanAttributes {
        var attributes: SpanAttributes = [:]
        attributes["messaging.system"] = "entitle"
        attributes["messaging.destination.name"] = queue
        attributes["entitle.job.type"] = type
        attributes["entitle.job.queue"] = queue
        if let id {
            attributes["messaging.message.id"] = id
            attributes["entitle.job.id"] = id
        }
        if let attempt { attributes["entitle.job.attempt"] = attempt }
        return attributes
    }
}

/// A `traceparent` carrier: a dictionary of header names to values.
struct TraceCarrier: Injector, Extractor {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}
