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
            var (moved, kept, failed) = (0, [String](), [String]())
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
                    return
                }
                switch try await Self.move(key, to: newKey, in: target) {
                case .moved: moved += 1
                case .gone: break
                case .writtenAtBoth: kept.append(key)
                case .failed(let why): failed.append("\(key): \(why)")
                }
            }
            print("\(moved) customers \(dryRun ? "would move" : "moved")")
            var problems: [String] = []
            if !kept.isEmpty {
                problems.append(
                    "\(kept.count) customers are written at both places (the new one was kept, the old left): \(kept.prefix(10).joined(separator: ", "))"
                )
            }
            if !failed.isEmpty {
                problems.append(
                    "\(failed.count) customers could not be moved (each left where it is): \(failed.prefix(10).joined(separator: "; "))")
            }
            if !problems.isEmpty { throw CommandFailure(problems.joined(separator: "\n")) }
        }

        /// What became of one customer's old key.
        enum Move: Equatable {
            case moved
            /// Moved already (SCAN may name a key twice).
            case gone
            /// A customer is written at the new key too, unlike the old one: both are left.
            case writtenAtBoth
            /// Left where it is, and why.
            case failed(String)
        }

        /// Moves a customer's hash to `newKey` unless another is written there already. On one
        /// server, one `RENAMENX`. On a cluster the two keys are in different slots, which no
        /// command may name together: the fields are copied to the new key, then the old key is
        /// deleted if it still holds what was copied. A copy that a run stopped before its delete
        /// left is found equal to the old key and finished.
        static func move(_ key: String, to newKey: String, in target: MigrationRedis) async throws -> Move {
            guard target.isCluster else {
                switch try await target.redis.pipeline([["RENAMENX", key, newKey]])[0] {
                case .integer(1): return .moved
                case .integer: return .writtenAtBoth
                case .error(let message) where message.contains("no such key"): return .gone
                case let other: return .failed(other.string ?? "\(other)")
                }
            }
            let read = try await target.redis.pipeline([["HGETALL", key], ["HGETALL", newKey]])
            if case .error(let message) = read[0] { return .failed(message) }
            if case .error(let message) = read[1] { return .failed("\(newKey): \(message)") }
            let replies = read[0].array ?? []
            var fields: [String] = []
            for reply in replies {
                // Every field of a customer is text; one that is not would not survive the copy.
                guard case .bulk(let bytes) = reply, let text = String(validating: bytes, as: UTF8.self) else {
                    return .failed("it holds a value that is not text")
                }
                fields.append(text)
            }
            guard !fields.isEmpty else { return .gone }
            let written = read[1].fieldValues
            if written.isEmpty {
                _ = try await target.redis.send(["HSET", newKey] + fields).checked()
            } else if written != read[0].fieldValues {
                return .writtenAtBoth
            }
            // A writer the procedure should have stopped, writing between the copy and here, keeps its write.
            guard try await target.redis.run(Self.deleteIfUnchanged, keys: [key], arguments: fields).int == 1 else {
                return .failed("it changed while it was copied: run it again")
            }
            return .moved
        }

        /// Deletes a hash if it holds exactly the field-value pairs given. KEYS: the hash. ARGV:
        /// field, value, .... Returns 1 if it deleted it.
        static let deleteIfUnchanged = RedisScript(
            name: "deleteIfUnchanged",
            source: """
                if redis.call('HLEN', KEYS[1]) * 2 ~= #ARGV then return 0 end
                for i = 1, #ARGV, 2 do
                  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then return 0 end
                end
                redis.call('DEL', KEYS[1])
                return 1
                """)
    }
}
