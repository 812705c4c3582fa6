import ArgumentParser
import EntitleCore
import Foundation
import Logging
import RedisClient

/// `entitle migrate customers`: moves customers written before the event log
/// (`{prefix}:ent:P:customer:C`) to where this version keeps them, under their partition's
/// hash tag (`{prefix}:ent:{P/NN}:customer:C`): on one server each by one `RENAMENX`, atomic;
/// on a Redis Cluster copied and then deleted (`Customers.move`). A customer already written
/// at the new place is left as it is and named. `entitle migrate holders` fills the push
/// audiences' indexes.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Move data written by an earlier version to where this one keeps it.",
        subcommands: [Customers.self, Holders.self])

    /// `entitle migrate holders`: puts customers written before the holder indexes existed
    /// into them, so pushes to an entitlement's or an offer's holders find them.
    struct Holders: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Index every customer's entitlements and offers for push audiences (after upgrading to push); safe to rerun.",
            discussion: """
                Reads each customer's document and adds them to the holder indexes where they are not yet (a score written \
                by a worker meanwhile stands). On a Redis Cluster, give its redis+cluster:// address: every primary is read.
                """)

        @OptionGroup var options: RedisOptions

        func run() async throws {
            let logger = options.makeLogger("entitle.migrate")
            let target = try await MigrationRedis.connect(options, logger: logger)
            defer { target.close() }
            let store = EntitlementStore(redis: target.redis, prefix: options.keyPrefix, logger: logger)
            let stem = options.keyPrefix + ":ent:{"
            var (customers, added) = (0, 0)
            try await target.scan(stem + "*}:customer:*") { key in
                // {prefix}:ent:{P/NN}:customer:C
                let rest = key.dropFirst(stem.count)
                guard let slash = rest.firstIndex(of: "/"), let close = rest.firstIndex(of: "}"), slash < close,
                    rest[close...].hasPrefix("}:customer:")
                else { return }
                let publisher = String(rest[..<slash])
                let customer = String(rest[rest.index(close, offsetBy: "}:customer:".count)...])
                added += try await store.indexHolders(publisher: publisher, customer: customer)
                customers += 1
            }
            print("\(customers) customers read, \(added) index entries added")
        }
    }

    struct Customers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Move customers to their partition's keys (after upgrading to the event log); run once, before the workers.",
            discussion: """
                One server or Sentinel: each customer moves by RENAMENX, atomically. On a Redis Cluster (give its \
                redis+cluster:// address) the old and new keys are in different slots: each primary is scanned, and each \
                customer is copied to its new key, then deleted from the old (a copy a stopped run left is finished when run \
                again). Their events before the upgrade are not in the log (reports count from it).
                """)

        @OptionGroup var options: RedisOptions

        @Flag(help: "Say what would move, moving nothing.")
        var dryRun = false

        func run() async throws {
            let logger = options.makeLogger("entitle.migrate")
            let target = try await MigrationRedis.connect(options, logger: logger)
            defer { target.close() }
            let keys = EntitlementKeys(prefix: options.keyPrefix)
            let stem = options.keyPrefix + ":ent:"
            var (moved, kept) = (0, [String]())
            try await target.scan(stem + "*:customer:*") { key in
                // Legacy: {prefix}:ent:P:customer:C, P a catalog id (no brace, no colon).
                let rest = key.dropFirst(stem.count)
                guard !rest.hasPrefix("{"), let colon = rest.firstIndex(of: ":") else { return }
                let publisher = String(rest[..<colon])
                guard rest[colon...].hasPrefix(":customer:") else { return }
                let customer = String(rest[rest.index(colon, offsetBy: ":customer:".count)...])
                let newKey = keys.customer(publisher, customer)
                if dryRun {
                    print("\(key) -> \(newKey)")
                    moved += 1
                } else if try await Self.move(key, to: newKey, in: target) {
                    moved += 1
                } else {
                    kept.append(key)
                }
            }
            print("\(moved) customers \(dryRun ? "would move" : "moved")")
            if !kept.isEmpty {
                throw CommandFailure(
                    "\(kept.count) customers are written at both places (the new one was kept, the old left): \(kept.prefix(10).joined(separator: ", "))"
                )
            }
        }

        /// Moves a customer's hash to `newKey` unless one is written there already (false). On
        /// one server, one `RENAMENX`. On a cluster the two keys are in different slots, which no
        /// command may name together: the fields are copied to the new key, then the old key is
        /// deleted. The workers are stopped, so nothing writes either meanwhile; a copy that a
        /// run stopped before its delete left is found equal to the old key and finished.
        static func move(_ key: String, to newKey: String, in target: MigrationRedis) async throws -> Bool {
            guard target.isCluster else { return try await target.redis.send(["RENAMENX", key, newKey]).checked().int == 1 }
            let replies = try await target.redis.send(["HGETALL", key]).checked().array ?? []
            var fields: [String] = []
            for reply in replies {
                // Every field of a customer is text; one that is not would not survive the copy.
                guard case .bulk(let bytes) = reply, let text = String(validating: bytes, as: UTF8.self) else {
                    throw CommandFailure("\(key) holds a value that is not text: it was left where it is")
                }
                fields.append(text)
            }
            guard !fields.isEmpty else { return true }  // moved meanwhile: nothing left to move
            let written = try await target.redis.send(["HGETALL", newKey]).checked().fieldValues
            if written.isEmpty {
                _ = try await target.redis.send(["HSET", newKey] + fields).checked()
            } else if written != RedisReply.array(replies).fieldValues {
                return false
            }
            _ = try await target.redis.send(["DEL", key]).checked()
            return true
        }
    }
}
