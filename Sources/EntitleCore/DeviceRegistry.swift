import APNs
import Foundation
import RedisClient

/// Customers' APNs devices in Redis: each customer's devices in a hash in the customer's
/// slot, and for each token who it belongs to now (the newest customer who registered it:
/// a shared iPad changes hands). The owner key is the truth; a device still listed by a
/// customer it no longer belongs to is not theirs, is never pushed to as theirs, and is
/// dropped from their list when next read.
///
/// Each command touches one key (scripts one hash), so it works on Redis Cluster as is.
package struct DeviceRegistry: Sendable {
    /// One registered device.
    package struct Device: Sendable, Hashable, Codable {
        package var token: DeviceToken
        package var bundleId: String
        package var pushType: APNsPushType
        package var environment: APNsClient.Environment
        /// The customer opted in to promotional pushes in the app (App Review Guideline 4.5.4).
        package var promotional: Bool
        /// When it was registered (ms since 1970, this server's clock): APNs' 410 removes
        /// it only when the token became invalid after this.
        package var registeredAt: Int64

        package init(
            token: DeviceToken, bundleId: String, pushType: APNsPushType, environment: APNsClient.Environment, promotional: Bool,
            registeredAt: Int64
        ) {
            self.token = token
            self.bundleId = bundleId
            self.pushType = pushType
            self.environment = environment
            self.promotional = promotional
            self.registeredAt = registeredAt
        }
    }

    /// What a registration did besides adding the device.
    package struct Registration: Sendable, Hashable {
        /// The customer the token belonged to before, when another.
        package var previousCustomer: String?
        /// Tokens dropped to keep the customer within the limit, oldest first.
        package var dropped: [String]
    }

    let redis: RedisConnectionPool
    let keys: EntitlementKeys

    package init(redis: RedisConnectionPool, keys: EntitlementKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Adds the device (`ARGV[1]` token, `ARGV[2]` JSON) and drops the oldest past `ARGV[3]`;
    /// returns the dropped tokens.
    static let add = RedisScript(
        name: "devices-add",
        source: """
            redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
            local limit = tonumber(ARGV[3])
            local count = redis.call('HLEN', KEYS[1])
            if count <= limit then return {} end
            local all = redis.call('HGETALL', KEYS[1])
            local devices = {}
            for i = 1, #all, 2 do
              local ok, device = pcall(cjson.decode, all[i + 1])
              local at = ok and tonumber(device.registeredAt) or 0
              table.insert(devices, {all[i], at})
            end
            table.sort(devices, function(a, b) if a[2] == b[2] then return a[1] < b[1] end return a[2] < b[2] end)
            local dropped = {}
            for i = 1, count - limit do
              if devices[i][1] ~= ARGV[1] then
                redis.call('HDEL', KEYS[1], devices[i][1])
                table.insert(dropped, devices[i][1])
              end
            end
            return dropped
            """)

    /// Removes token `ARGV[1]` from the hash when it was registered before `ARGV[2]` ms (a
    /// later registration stands); 1 when removed.
    static let removeIfOlder = RedisScript(
        name: "devices-remove-if-older",
        source: """
            local raw = redis.call('HGET', KEYS[1], ARGV[1])
            if not raw then return 0 end
            local ok, device = pcall(cjson.decode, raw)
            if ok and tonumber(device.registeredAt) and tonumber(device.registeredAt) > tonumber(ARGV[2]) then return 0 end
            return redis.call('HDEL', KEYS[1], ARGV[1])
            """)

    /// Deletes the key when it still holds `ARGV[1]`.
    static let deleteIfEqual = RedisScript(
        name: "delete-if-equal",
        source: """
            if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
            return 0
            """)

    /// Registers `device` for `customer`: it leaves the customer who had it, and the
    /// customer's oldest devices past `limit` are dropped.
    package func register(_ device: Device, publisher: String, customer: String, limit: Int) async throws -> Registration {
        let json = String(decoding: try JSONEncoder.sorted.encode(device), as: UTF8.self)
        let token = device.token.hex
        let previous = try await redis.send(["SET", keys.deviceOwner(publisher, token: token), customer, "GET"]).string
        let dropped =
            try await redis.run(Self.add, keys: [keys.devices(publisher, customer)], arguments: [token, json, String(limit)]).array?
            .compactMap(\.string) ?? []
        for old in dropped {
            _ = try await redis.run(Self.deleteIfEqual, keys: [keys.deviceOwner(publisher, token: old)], arguments: [customer])
        }
        if let previous, previous != customer {
            _ = try await redis.run(
                Self.removeIfOlder, keys: [keys.devices(publisher, previous)], arguments: [token, String(device.registeredAt)])
        }
        return Registration(previousCustomer: previous == customer ? nil : previous, dropped: dropped)
    }

    /// Removes the customer's device; `false` when the token is not theirs (now).
    package func remove(token: DeviceToken, publisher: String, customer: String) async throws -> Bool {
        let owned = try await redis.run(Self.deleteIfEqual, keys: [keys.deviceOwner(publisher, token: token.hex)], arguments: [customer])
        _ = try await redis.send(["HDEL", keys.devices(publisher, customer), token.hex])
        return owned.int == 1
    }

    /// APNs said the token stopped being valid at `unregisteredAt` (ms): the device goes,
    /// unless it was registered again after that.
    package func forget(token: DeviceToken, publisher: String, customer: String, unregisteredAt: Int64) async throws -> Bool {
        let removed = try await redis.run(
            Self.removeIfOlder, keys: [keys.devices(publisher, customer)], arguments: [token.hex, String(unregisteredAt)])
        guard removed.int == 1 else { return false }
        _ = try await redis.run(Self.deleteIfEqual, keys: [keys.deviceOwner(publisher, token: token.hex)], arguments: [customer])
        return true
    }

    /// The customer's devices, oldest first.
    package func devices(publisher: String, customer: String) async throws -> [Device] {
        try await devices(publisher: publisher, customers: [customer])[customer] ?? []
    }

    /// The devices of each customer (two pipelined round trips whatever their number): only
    /// the tokens each still owns; entries left behind by a token's move are dropped.
    package func devices(publisher: String, customers: [String]) async throws -> [String: [Device]] {
        guard !customers.isEmpty else { return [:] }
        let lists = try await redis.pipeline(customers.map { ["HGETALL", keys.devices(publisher, $0)] })
        var listed: [(customer: String, device: Device)] = []
        let decoder = JSONDecoder()
        for (customer, reply) in zip(customers, lists) {
            for (_, json) in reply.fieldValues {
                guard let device = try? decoder.decode(Device.self, from: Data(json.utf8)) else { continue }
                listed.append((customer, device))
            }
        }
        guard !listed.isEmpty else { return [:] }
        let owners = try await redis.pipeline(listed.map { ["GET", keys.deviceOwner(publisher, token: $0.device.token.hex)] })
        var result: [String: [Device]] = [:]
        for (entry, owner) in zip(listed, owners) {
            if owner.string == entry.customer {
                result[entry.customer, default: []].append(entry.device)
            } else {
                // Not if the customer registered it again since it was read.
                _ = try await redis.run(
                    Self.removeIfOlder, keys: [keys.devices(publisher, entry.customer)],
                    arguments: [entry.device.token.hex, String(entry.device.registeredAt)])
            }
        }
        for customer in result.keys { result[customer]?.sort { ($0.registeredAt, $0.token.hex) < ($1.registeredAt, $1.token.hex) } }
        return result
    }
}

extension JSONEncoder {
    /// Keys in order: the same value is the same bytes.
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }
}
