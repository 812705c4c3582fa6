import Metrics

/// The client's counters, created once per process (labels are bounded: error codes only).
public struct RedisClientMetrics: Sendable {
    public static let shared = RedisClientMetrics()

    let commands = Counter(label: "entitle_redis_commands_total")
    let reconnects = Counter(label: "entitle_redis_reconnects_total")
    private let errorCounters: [RedisError.Code: Counter]

    init() {
        let codes: [RedisError.Code] = [.connectionFailed, .connectionLost, .timeout, .protocolError]
        errorCounters = Dictionary(
            uniqueKeysWithValues: codes.map {
                ($0, Counter(label: "entitle_redis_errors_total", dimensions: [("code", $0.description)]))
            })
    }

    func errors(_ code: RedisError.Code) -> Counter {
        errorCounters[code] ?? Counter(label: "entitle_redis_errors_total", dimensions: [("code", "other")])
    }
}
