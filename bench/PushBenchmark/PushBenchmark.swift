import APNs
import DurationUnits
import EntitleCore
import Entitlements
import Foundation
import Logging
import RedisClient

/// `bench/push.sh`'s Swift side: seeds a publisher's customers through the real store (each
/// write keeps the holder indexes, as every job's write does) and registers one APNs device
/// for each holder through the real registry; then measures:
/// - Redis bytes per registered device (`used_memory` over the registrations);
/// - the time to find the audience (everyone entitled to `premium` now) among all customers,
///   the median of 20 lookups, as the `push` job finds it (`EntitlementStore.holders`).
///
/// usage: push-bench REDIS_URL PREFIX CUSTOMERS HOLDERS   (prints one JSON line)
@main struct PushBenchmark {
    static func main() async throws {
        let arguments = CommandLine.arguments
        guard arguments.count >= 5, let total = Int(arguments[3]), let holders = Int(arguments[4]), holders <= total else {
            FileHandle.standardError.write(Data("usage: push-bench REDIS_URL PREFIX CUSTOMERS HOLDERS\n".utf8))
            exit(2)
        }
        let logger = Logger(label: "push-bench", factory: { _ in SwiftLogNoOpLogHandler() })
        let redis = RedisConnectionPool(configuration: try RedisConfiguration(url: arguments[1]), maximumConnections: 16, logger: logger)
        let store = EntitlementStore(redis: redis, prefix: arguments[2], logger: logger)
        let now = Date()
        let clock = ContinuousClock()

        // Customers: `holders` with a month of premium, the others with basic.
        var began = clock.now
        try await inParallel(total) { index in
            let holder = index < holders
            let customer = "c\(index)@example.com"
            try await store.update(publisher: "demo", customer: customer) { state in
                let transaction = "\(1_000_000_000 + index)"
                state.periods = [
                    AccessPeriod(
                        transactionId: transaction, originalTransactionId: transaction, offerId: holder ? "premium" : "basic",
                        productId: holder ? "com.entitle.demo.premium.monthly" : "com.entitle.demo.basic.monthly",
                        entitlements: holder ? ["premium", "hd"] : ["basic"], start: now.addingTimeInterval(-86_400),
                        end: now.addingTimeInterval(30 * 86_400))
                ]
            }
        }
        let seeded = (clock.now - began).seconds

        // One device per holder.
        let memoryBefore = try await usedMemory(redis)
        began = clock.now
        let devices = store.devices
        try await inParallel(holders) { index in
            let token = DeviceToken(String(format: "%064x", index + 1))!
            let device = DeviceRegistry.Device(
                token: token, bundleId: "com.entitle.demo", pushType: .alert, environment: .production, promotional: index % 2 == 0,
                registeredAt: Int64(now.timeIntervalSince1970 * 1000))
            _ = try await devices.register(device, publisher: "demo", customer: "c\(index)@example.com", limit: 20)
        }
        let registered = (clock.now - began).seconds
        let bytesPerDevice = Double(try await usedMemory(redis) - memoryBefore) / Double(max(1, holders))

        // The audience, as the push job finds it.
        let ms = Int64(now.timeIntervalSince1970 * 1000)
        var times: [Double] = []
        var found = 0
        for _ in 0..<20 {
            let start = clock.now
            found = try await store.holders(publisher: "demo", entitlement: "premium", after: ms).count
            times.append((clock.now - start).seconds)
        }
        times.sort()
        let result: [String: Any] = [
            "customers": total, "holders": holders, "audienceFound": found, "audienceMedianSeconds": times[times.count / 2],
            "audienceSlowestSeconds": times.last ?? 0, "bytesPerDevice": bytesPerDevice.rounded(),
            "customersSeededPerSecond": (Double(total) / seeded).rounded(),
            "devicesRegisteredPerSecond": (Double(holders) / registered).rounded(),
        ]
        print(String(decoding: try JSONSerialization.data(withJSONObject: result, options: .sortedKeys), as: UTF8.self))
        redis.close()
    }

    static func usedMemory(_ redis: RedisConnectionPool) async throws -> Int {
        let info = try await redis.send(["INFO", "memory"]).string ?? ""
        let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("used_memory:") }
        return line.flatMap { Int($0.dropFirst("used_memory:".count)) } ?? 0
    }

    /// Runs `body` for 0..<count, 64 at a time.
    static func inParallel(_ count: Int, _ body: @escaping @Sendable (Int) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            while next < min(64, count) {
                let index = next
                group.addTask { try await body(index) }
                next += 1
            }
            while try await group.next() != nil {
                guard next < count else { continue }
                let index = next
                group.addTask { try await body(index) }
                next += 1
            }
        }
    }
}
