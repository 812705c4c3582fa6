import Foundation
import RedisTestSupport
import Testing

@testable import RedisClient

/// The client on a real 3-primary, 3-replica Redis Cluster on loopback. Serialized: each
/// test has a cluster of its own, and six servers at a time is enough for two cores.
@Suite(.serialized) struct ClusterClientTests {
    func pool(_ cluster: LocalRedisCluster, name: String = "cluster", reconnect: Duration = .seconds(20)) throws -> RedisConnectionPool {
        var configuration = try RedisConfiguration(url: cluster.url)
        configuration.reconnectTimeout = reconnect
        configuration.connectTimeout = .milliseconds(300)
        return RedisConnectionPool(configuration: configuration, maximumConnections: 4, name: name, logger: TestRedis.logger)
    }

    /// Runs `body` with a fresh cluster and stops it however the body ends.
    func withCluster(_ body: (LocalRedisCluster) async throws -> Void) async throws {
        let cluster = try await LocalRedisCluster.start()
        do {
            try await body(cluster)
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test func routesCommandsPipelinesAndScriptsToTheirSlotsAndRefusesCrossSlot() async throws {
        try await withCluster { cluster in
            // Slots: ours agree with the server's, hash tags included.
            let samples =
                [
                    "", "a", "foo", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}",
                    "entitle:{default}:pending", "entitle:{receipts}:job:0123456789abcdef", "entitle:ent:app:customer:42", "ünïcødé",
                ]
                + (0..<200).map { "key-\($0)" }
            let node = try await cluster.anyNode()
            for key in samples {
                let expected = try await node.send(["CLUSTER", "KEYSLOT", key]).int
                #expect(RedisKeySlot.slot(key) == expected, "slot of '\(key)'")
            }

            let redis = try pool(cluster)
            defer { redis.close() }
            // 300 keys over all three primaries, written one by one and read back in one pipeline.
            let keys = (0..<300).map { "k:\($0)" }
            for key in keys { try await redis.send(["SET", key, "v-\(key)"]) }
            let values = try await redis.pipeline(keys.map { ["GET", $0] })
            #expect(values.map(\.string) == keys.map { "v-\($0)" })
            // Each key is where the cluster says: on its slot's primary, and only there.
            var servers = Set<String>()
            for key in keys.prefix(30) {
                let owner = try await cluster.primary(forKey: key)
                #expect(try await redis.server(forKey: key) == owner.address)
                #expect(try await owner.send(["GET", key]).string == "v-\(key)")
                servers.insert(owner.address)
            }
            #expect(servers.count == 3, "the keys spread over the three primaries")
            var total = 0
            for primary in try await cluster.roles().primaries { total += try await primary.send(["DBSIZE"]).int ?? 0 }
            #expect(total == keys.count)

            // A script with keys of one tag runs on that slot's primary.
            let script = RedisScript(name: "swap", source: "local a = redis.call('GET', KEYS[1]); redis.call('SET', KEYS[2], a); return a")
            try await redis.send(["SET", "{t}:a", "x"])
            #expect(try await redis.run(script, keys: ["{t}:a", "{t}:b"], arguments: []).string == "x")
            #expect(try await (try await cluster.primary(forKey: "{t}:b")).send(["GET", "{t}:b"]).string == "x")

            // Keys in two slots: refused before anything is sent, with a clear error.
            let crossCommand = await #expect(throws: RedisError.self) { try await redis.send(["MGET", "k:1", "k:2"]) }
            #expect(crossCommand?.code == .crossSlot)
            let crossScript = await #expect(throws: RedisError.self) { try await redis.run(script, keys: ["k:1", "k:2"], arguments: []) }
            #expect(crossScript?.code == .crossSlot)
            // Keys let span slots off a cluster are refused on one all the same.
            let crossSpanning = await #expect(throws: RedisError.self) {
                try await redis.run(script, keys: ["k:1"], otherSlotKeys: ["k:2"], arguments: [])
            }
            #expect(crossSpanning?.code == .crossSlot)
        }
    }

    @Test func followsAskWhileASlotMigratesAndMovedAfterwards() async throws {
        try await withCluster { cluster in
            let redis = try pool(cluster)
            defer { redis.close() }
            let tag = "{mig}"
            let slot = RedisKeySlot.slot(tag)
            let keys = (0..<200).map { "\(tag):\($0)" }
            for key in keys { try await redis.send(["SET", key, key]) }
            let source = try await cluster.primary(forSlot: slot)
            let target = try #require(try await cluster.roles().primaries.first { $0.port != source.port })

            // Half the keys moved, the slot still migrating: reads of moved keys get ASK,
            // new keys are created on the target (ASK), counters keep counting.
            let sourceID = try await source.send(["CLUSTER", "MYID"]).string ?? ""
            let targetID = try await target.send(["CLUSTER", "MYID"]).string ?? ""
            try await target.send(["CLUSTER", "SETSLOT", String(slot), "IMPORTING", sourceID])
            try await source.send(["CLUSTER", "SETSLOT", String(slot), "MIGRATING", targetID])
            let half = try await source.send(["CLUSTER", "GETKEYSINSLOT", String(slot), "100"]).array?.compactMap(\.string) ?? []
            try await source.send(["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"] + half)
            let during = try await redis.pipeline(keys.map { ["GET", $0] })
            #expect(during.map(\.string) == keys)
            try await redis.send(["SET", "\(tag):new", "created during the move"])
            // The map did not change for an ASK.
            #expect(try await redis.server(forKey: tag) == source.address)

            // The rest moves; the slot is the target's now: the first command learns it (MOVED).
            while true {
                let rest = try await source.send(["CLUSTER", "GETKEYSINSLOT", String(slot), "100"]).array?.compactMap(\.string) ?? []
                if rest.isEmpty { break }
                try await source.send(["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"] + rest)
            }
            for node in [target, source] { try await node.send(["CLUSTER", "SETSLOT", String(slot), "NODE", targetID]) }
            #expect(try await redis.send(["GET", "\(tag):new"]).string == "created during the move")
            #expect(try await redis.server(forKey: tag) == target.address)
            let after = try await redis.pipeline(keys.map { ["GET", $0] })
            #expect(after.map(\.string) == keys)
        }
    }

    @Test func aBlockedConsumerFollowsItsSlotAndCommandsSurviveFailovers() async throws {
        try await withCluster { cluster in
            let redis = try pool(cluster)
            defer { redis.close() }
            let list = "{blk}:list"
            let blocking = redis.makeDedicatedConnection(name: "blocker")
            // The consumer blocks on the owner of the list's slot; the slot moves to another primary.
            let source = try await cluster.primary(forKey: list)
            let target = try #require(try await cluster.roles().primaries.first { $0.port != source.port })
            let received = Task {
                var got: [String] = []
                while got.count < 2 {
                    if let item = try? await blocking.send(["BLMOVE", list, "{blk}:taken", "RIGHT", "LEFT", "0.5"], timeout: .seconds(3))
                        .string
                    {
                        got.append(item)
                    }
                }
                return got
            }
            try await redis.send(["LPUSH", list, "one"])
            try await cluster.migrate(slot: RedisKeySlot.slot(list), to: target)
            try await redis.send(["LPUSH", list, "two"])
            #expect(try await received.value == ["one", "two"])
            #expect(try await target.send(["LLEN", "{blk}:taken"]).int == 2)

            // A graceful failover (CLUSTER FAILOVER on the replica), then kill -9 of a primary:
            // commands for its slots are answered again once its replica has taken over.
            let victim = try await cluster.primary(forKey: "{f}:x")
            let replica = try await cluster.replica(of: victim)
            try await redis.send(["SET", "{f}:x", "1"])
            try await cluster.failover(to: replica)
            #expect(try await redis.send(["INCR", "{f}:x"]).int == 2)

            #expect(try await replica.send(["WAIT", "1", "2000"]).int == 1)
            let clock = ContinuousClock()
            let killed = clock.now
            await replica.kill()
            // The old primary (a replica now) takes over; the next command waits for it.
            // Commands on connections open at the kill fail (they may have run): callers retry.
            #expect(try await retryingLostConnections { try await redis.send(["GET", "{f}:x"]) }.string == "2")
            #expect(try await redis.send(["INCR", "{f}:x"]).int == 3)
            let recovery = clock.now - killed
            #expect(try await redis.server(forKey: "{f}:x") == victim.address)
            print("cluster client: commands answered again \(recovery) after kill -9 of a primary (node timeout 1.5 s)")
        }
    }
}

/// The client on a real primary with two replicas and three sentinels.
@Suite(.serialized) struct SentinelClientTests {
    @Test func findsThePrimaryAndFollowsAFailover() async throws {
        let group = try await LocalSentinelGroup.start()
        do {
            var configuration = try RedisConfiguration(url: group.url)
            configuration.reconnectTimeout = .seconds(30)
            configuration.connectTimeout = .milliseconds(300)
            let redis = RedisConnectionPool(configuration: configuration, maximumConnections: 2, logger: TestRedis.logger)
            defer { redis.close() }
            let first = try await group.primary()
            #expect(try await redis.server(forKey: "any") == first.address)
            #expect(try await redis.send(["INCR", "n"]).int == 1)
            // Replicated before the kill, so no acknowledged write can be lost.
            #expect(try await first.send(["WAIT", "2", "2000"]).int == 2)

            let clock = ContinuousClock()
            let killed = clock.now
            await first.kill()
            // The client learns the new primary from +switch-master before it sends anything.
            try await eventually("+switch-master to reach the client", timeout: .seconds(30)) {
                let now = try await redis.server(forKey: "any")
                let primary = try? await group.primary().address
                return now != first.address && primary == now
            }
            #expect(try await retryingLostConnections { try await redis.send(["GET", "n"]) }.string == "1")
            #expect(try await redis.send(["INCR", "n"]).int == 2)
            let recovery = clock.now - killed
            let second = try await group.primary()
            #expect(second.port != first.port)
            #expect(try await redis.server(forKey: "any") == second.address)
            print("sentinel client: commands answered again \(recovery) after kill -9 of the primary (down-after 1 s)")

            // A planned failover: the old primary turns replica under open connections (READONLY), the client follows.
            // Sentinel refuses (NOGOODSLAVE) until the remaining replica has synced with the new primary.
            try await eventually("the sentinel to accept a failover", timeout: .seconds(30)) {
                (try? await group.sentinels[0].send(["SENTINEL", "FAILOVER", group.name]))?.string == "OK"
            }
            try await eventually("the planned failover", timeout: .seconds(30)) { (try? await group.primary().port) != second.port }
            try await retryingLostConnections { try await redis.send(["SET", "after", "planned failover"]) }
            #expect(try await redis.send(["GET", "after"]).string == "planned failover")
            try await eventually("the client to name the new primary") {
                let now = try await redis.server(forKey: "any")
                let role = try? await group.servers.first { $0.address == now }?.send(["ROLE"]).array?.first?.string
                return now != second.address && role == "master"
            }
        } catch {
            await group.stop()
            throw error
        }
        await group.stop()
    }

    @Test func urlForms() throws {
        let cluster = try RedisConfiguration(url: "redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001?replicas=1")
        #expect(cluster.topology == .cluster(seeds: [.init(host: "10.0.0.1", port: 7000), .init(host: "10.0.0.2", port: 7001)]))
        #expect(cluster.password == "pw" && cluster.replicaAcknowledgements == 1)
        let sentinel = try RedisConfiguration(url: "redis+sentinel://s1:26379,s2:26380/main/2")
        #expect(
            sentinel.topology
                == .sentinel(sentinels: [.init(host: "s1", port: 26379), .init(host: "s2", port: 26380)], primaryName: "main"))
        #expect(sentinel.database == 2)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis+cluster://h:1/3") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis+sentinel://h:1") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://h:1?bogus=1") }
        // Who holds every key on one server: one server and Sentinel's primary, not a cluster
        // nor a sharded address.
        #expect(try RedisConfiguration(url: "redis://h:1").holdsEveryKeyOnOneServer)
        #expect(sentinel.holdsEveryKeyOnOneServer)
        #expect(!cluster.holdsEveryKeyOnOneServer)
        let sharded = try RedisConfiguration(url: "redis://h:1?sharded=yes")
        #expect(sharded.sharded && !sharded.holdsEveryKeyOnOneServer)
        // Who runs a pipeline's calls in the order sent: one server only (Sentinel's client
        // sends again what a changing deployment refused, after the calls beside it).
        #expect(try RedisConfiguration(url: "redis://h:1").runsPipelinesInOrder)
        #expect(!sentinel.runsPipelinesInOrder && !cluster.runsPipelinesInOrder && !sharded.runsPipelinesInOrder)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://h:1?sharded=maybe") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis://h:99999") }
    }
}

/// Runs `body` again when a connection open at a crash breaks under it (at most 5 times):
/// what a caller of an idempotent command does.
func retryingLostConnections<T>(_ body: () async throws -> T) async throws -> T {
    var attempt = 0
    while true {
        attempt += 1
        do {
            return try await body()
        } catch let error as RedisError where (error.code == .connectionLost || error.code == .timeout) && attempt < 5 {
            continue
        }
    }
}
