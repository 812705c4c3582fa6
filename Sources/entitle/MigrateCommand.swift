import ArgumentParser
import EntitleCore
import Foundation
import Logging
import RedisClient

/// `entitle migrate customers`: moves customers written before the event log
/// (`{prefix}:ent:P:customer:C`) to where this version keeps them, under their partition's
/// hash tag (`{prefix}:ent:{P/NN}:customer:C`), each by one `RENAMENX`: atomic, and a
/// customer already written at the new place is left as it is and named.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Move data written by an earlier version to where this one keeps it.",
        subcommands: [Customers.self, Holders.self])

    /// One server or Sentinel, one connection: the migrations scan one server at a time.
    static func connect(_ options: RedisOptions, logger: Logger) throws -> RedisConnectionPool {
        let configuration = try RedisConfiguration(url: options.redisURL)
        if case .cluster = configuration.topology {
            throw ValidationError("on a Redis Cluster, run it against each primary with --redis redis://NODE (see --help)")
        }
        return RedisConnectionPool(configuration: configuration, maximumConnections: 1, logger: logger)
    }

    /// `entitle migrate holders`: puts customers written before the holder indexes existed
    /// into them, so pushes to an entitlement's or an offer's holders find them.
    struct Holders: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Index every customer's entitlements and offers for push audiences (after upgrading to push); safe to rerun.",
            discussion: """
                Reads each customer's document and adds them to the holder indexes where they are not yet (a score written \
                by a worker meanwhile stands). On a Redis Cluster, run it against each primary with --redis redis://NODE.
                """)

        @OptionGroup var options: RedisOptions

        func run() async throws {
            let logger = options.makeLogger("entitle.migrate")
            let redis = try MigrateCommand.connect(options, logger: logger)
            defer { redis.close() }
            let store = EntitlementStore(redis: redis, prefix: options.keyPrefix, logger: logger)
            let stem = options.keyPrefix + ":ent:{"
            var (customers, added, cursor) = (0, 0, "0")
            repeat {
                let reply = try await redis.send(["SCAN", cursor, "MATCH", stem + "*}:customer:*", "COUNT", "1000"])
                let parts = reply.array ?? []
                cursor = parts.first?.string ?? "0"
                for key in (parts.last?.array ?? []).compactMap(\.string) {
                    // {prefix}:ent:{P/NN}:customer:C
                    let rest = key.dropFirst(stem.count)
                    guard let slash = rest.firstIndex(of: "/"), let close = rest.firstIndex(of: "}"), slash < close,
                        rest[close...].hasPrefix("}:customer:")
                    else { continue }
                    let publisher = String(rest[..<slash])
                    let customer = String(rest[rest.index(close, offsetBy: "}:customer:".count)...])
                    added += try await store.indexHolders(publisher: publisher, customer: customer)
                    customers += 1
                }
            } while cursor != "0"
            print("\(customers) customers read, \(added) index entries added")
        }
    }

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
            let redis = try MigrateCommand.connect(options, logger: logger)
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
