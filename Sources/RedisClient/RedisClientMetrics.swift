import Metrics

/// The client's counters, created once per process (labels are bounded: error codes only).
public struct RedisClientMetrics: Sendable {
    public static let shared = RedisClientMetrics()

    let commands = Counter(label: "entitle_redis_commands_total")
    /// Calls that wrote and read on a socket: a pipeline or a script call is one, however many
    /// commands, and each caller of a shared write (`sharedWrites`) counts its own.
    let roundTrips = Counter(label: "entitle_redis_round_trips_total")
    /// Writes that carried more than one caller's commands (a pool's busy connections share
    /// their next write among the callers waiting for them).
    let sharedWrites = Counter(label: "entitle_redis_shared_writes_total")
    let reconnects = Counter(label: "entitle_redis_reconnects_total")
    /// MOVED and ASK replies followed (slots moving, or a map out of date).
    let redirects = Counter(label: "entitle_redis_redirects_total")
    /// Times the client read a cluster's or Sentinel's topology.
    let topologyReads = Counter(label: "entitle_redis_topology_reads_total")
    /// Write round trips that fewer replicas confirmed than `replicaAcknowledgements`.
    let unreplicatedWrites = Counter(label: "entitle_redis_unreplicated_writes_total")
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
