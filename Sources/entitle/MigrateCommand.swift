import ArgumentParser
import EntitleCore
import Foundation
import RedisClient

/// `entitle migrate customers`: moves customers written before the event log
/// (`{prefix}:ent:P:customer:C`) to where this version keeps them, under their partition's
/// hash tag (`{prefix}:ent:{P/NN}:customer:C`), each by one `RENAMENX`: atomic, and a
/// customer already written at the new place is left as it is and named.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Move data written by an earlier version to where this one keeps it.",
        subcommands: [Customers.self])

    struct Customers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move customers to their partition's keys (after upgrading to the event log); run once, before the workers.",
            discussion: """
                One server or Sentinel: each customer moves by RENAMENX, atomically. On a Redis Cluster the old and new keys \
                are in different slots: run it against each primary with --redis redis://NODE (a plain connection), as it \
                scans one server at a time. Their events before the upgrade are not in the log (reports count from it).
                """)

        @OptionGroup var options: RedisOptions

        @Flag(help: "Say what would move, moving nothing.")
        var dryRun = false

        func run() async throws {
            let logger = options.makeLogger("entitle.migrate")
            let configuration = try RedisConfiguration(url: options.redisURL)
            if case .cluster = configuration.topology {
                throw ValidationError("on a Redis Cluster, run it against each primary with --redis redis://NODE (see --help)")
            }
            let redis = RedisConnectionPool(configuration: configuration, maximumConnections: 1, logger: logger)
            defer { redis.close() }
            let keys = EntitlementKeys(prefix: options.keyPrefix)
            let stem = options.keyPrefix + ":ent:"
            var (moved, kept, cursor) = (0, [String](), "0")
            repeat {
                let reply = try await redis.send(["SCAN", cursor, "MATCH", stem + "*:customer:*", "COUNT", "1000"])
                let parts = reply.array ?? []
                cursor = parts.first?.string ?? "0"
                for key in (parts.last?.array ?? []).compactMap(\.string) {
                    // Legacy: {prefix}:ent:P:customer:C, P a catalog id (no brace, no colon).
                    let rest = key.dropFirst(stem.count)
                    guard !rest.hasPrefix("{"), let colon = rest.firstIndex(of: ":") else { continue }
                    let publisher = String(rest[..<colon])
                    guard rest[colon...].hasPrefix(":customer:") else { continue }
                    let customer = String(rest[rest.index(colon, offsetBy: ":customer:".count)...])
                    let target = keys.customer(publisher, customer)
                    if dryRun {
                        print("\(key) -> \(target)")
                        moved += 1
                    } else if try await redis.send(["RENAMENX", key, target]).int == 1 {
                        moved += 1
                    } else {
                        kept.append(key)
                    }
                }
            } while cursor != "0"
            print("\(moved) customers \(dryRun ? "would move" : "moved")")
            if !kept.isEmpty {
                throw CommandFailure(
                    "\(kept.count) customers are written at both places (the new one was kept, the old left): \(kept.prefix(10).joined(separator: ", "))"
                )
            }
        }
    }
}
