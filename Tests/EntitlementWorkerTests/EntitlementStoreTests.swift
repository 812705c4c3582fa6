import EntitleCore
import Entitlements
import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Reporting
import Testing

/// The entitlement store against a real redis-server.
@Suite struct EntitlementStoreTests {
    func store() async throws -> EntitlementStore {
        EntitlementStore(redis: try await TestRedis.pool(), prefix: TestRedis.uniquePrefix("ent"), logger: TestRedis.logger)
    }

    static let catalog =
        #"{"publishers":[{"id":"voip","apps":[{"bundleId":"com.voip","environments":["Sandbox"]}],"offers":[{"offerId":"credits","productIds":["credits.10"],"credits":10}]}]}"#

    /// The engine of the one-publisher catalog above.
    let engine: EntitlementEngine

    init() throws {
        engine = EntitlementEngine(publisher: try #require(try EntitlementCatalog(json: Data(Self.catalog.utf8)).publisher("voip")))
    }

    func credit(_ id: String, at date: Date = Date(timeIntervalSince1970: 1_790_000_000)) -> PurchaseFact {
        PurchaseFact(
            transactionId: id, originalTransactionId: id, productId: "credits.10", bundleId: "com.voip", kind: .consumable,
            environment: "Sandbox", purchaseDate: date)
    }

    @Test func updatesAreVersionedAndRepeatsWriteNothing() async throws {
        let store = try await store()
        #expect(try await store.load(publisher: "voip", customer: "alice").version == 0)
        let first = try await store.update(publisher: "voip", customer: "alice") { state in
            engine.apply(credit("1"), to: &state, now: Date())
        }
        #expect(first.creditsAdded == 10)
        let (state, version) = try await store.load(publisher: "voip", customer: "alice")
        #expect(version == 1)
        #expect(state.credits.balance == 10)
        // The same purchase again: the engine changes nothing, so nothing is written.
        let repeatDecision = try await store.update(publisher: "voip", customer: "alice") { state in
            engine.apply(credit("1"), to: &state, now: Date())
        }
        #expect(!repeatDecision.changed)
        #expect(try await store.load(publisher: "voip", customer: "alice").version == 1)
        // A refused purchase for a new customer leaves no document behind.
        _ = try await store.update(publisher: "voip", customer: "bob") { state in
            var unknown = credit("9")
            unknown.productId = "nope"
            return engine.apply(unknown, to: &state, now: Date())
        }
        #expect(try await store.redis.send(["EXISTS", "\(store.prefix):ent:voip:customer:bob"]).int == 0)
    }

    /// Entries go to the log deflated (`Z`, and `D` for report pieces) or, for a rolling
    /// upgrade, compact (`E`, `d`) or in the long form (`e`); the timeline reads every form,
    /// whichever wrote it, in order. `ENTITLE_EVENT_FORMAT` picks the form (unset: long with
    /// `ENTITLE_CUSTOMER_FORMAT=json`, else deflated).
    @Test func eventsAreWrittenInTheChosenFormAndEveryFormIsRead() async throws {
        var store = try await store()
        func credit(_ id: String, by store: EntitlementStore) async throws {
            _ = try await store.update(
                publisher: "voip", customer: "alice", fence: nil, { state in engine.apply(self.credit(id), to: &state, now: Date()) },
                effects: { _, _, version in
                    var event = LifecycleEvent(
                        id: "voip:alice:credits_granted:\(id)", type: .creditsGranted, publisher: "voip", customer: "alice",
                        occurredAt: Date(timeIntervalSince1970: 1_790_000_000), recordedAt: Date(timeIntervalSince1970: 1_790_000_000.5))
                    (event.transactionId, event.customerVersion, event.amount) = (id, version, 10)
                    let piece = ReportPiece(phase: .credits, from: Date(timeIntervalSince1970: 1_790_000_000), to: nil)
                    return EntitlementStore.Change(events: [event], delta: ReportDelta(removed: [], added: [piece]))
                })
        }
        store.eventFormat = .long
        try await credit("1", by: store)
        store.eventFormat = .compact
        try await credit("2", by: store)
        store.eventFormat = .deflated
        try await credit("3", by: store)
        let stream = store.keys.events("voip", customer: "alice")
        let fields = try await store.redis.send(["XRANGE", stream, "-", "+"]).array?.compactMap { $0.array?.last?.array?.first?.string }
        #expect(fields == ["e", "d", "E", "d", "Z", "D"])
        let log = EventLog(redis: store.redis, keys: store.keys)
        let timeline = try await log.customerEvents(publisher: "voip", customer: "alice", before: nil, limit: 10)
        #expect(timeline.events.map(\.event.transactionId) == ["3", "2", "1"])
        #expect(timeline.events.allSatisfy { $0.event.amount == 10 && $0.event.publisher == "voip" })
        // The reports' reader: every event and every change of pieces, whichever form.
        let partition = EntitlementKeys.partition(of: "alice")
        let entries = try await log.entries(publisher: "voip", partition: partition, after: "0", count: 100)
        let deltas = entries.compactMap { if case .delta(let delta, let customer) = $0.entry { (delta, customer) } else { nil } }
        #expect(deltas.count == 3 && deltas.allSatisfy { $0.1 == "alice" && $0.0.added.first?.phase == .credits })
        #expect(entries.filter { if case .event = $0.entry { true } else { false } }.count == 3)

        #expect(try await AppStoreHostTests.settings([:]).eventFormat == .deflated)
        #expect(try await AppStoreHostTests.settings(["ENTITLE_CUSTOMER_FORMAT": "json"]).eventFormat == .long)
        #expect(try await AppStoreHostTests.settings(["ENTITLE_EVENT_FORMAT": "long"]).eventFormat == .long)
        #expect(try await AppStoreHostTests.settings(["ENTITLE_EVENT_FORMAT": "compact"]).eventFormat == .compact)
        let packedBeside = try await AppStoreHostTests.settings(["ENTITLE_CUSTOMER_FORMAT": "json", "ENTITLE_EVENT_FORMAT": "deflated"])
        #expect(packedBeside.eventFormat == .deflated && packedBeside.customerFormat == .json)
        await #expect(throws: WorkerError.self) { try await AppStoreHostTests.settings(["ENTITLE_EVENT_FORMAT": "short"]) }
    }

    /// A customer stored as older versions wrote it (plain JSON in `doc`, `v`, `ev`, a
    /// `fence:T` per transaction) is read as it was; its next change writes the packed record
    /// (one field `doc`, the document deflated) carrying the version, the event ids and every
    /// fence, so a lock holder fenced out before is still fenced out after.
    @Test func aCustomerInTheOlderLayoutIsReadAndRewrittenPacked() async throws {
        let store = try await store()
        let locks = TransactionLock(redis: store.redis, prefix: store.prefix)
        var old = CustomerEntitlements(publisher: "voip", customer: "carol")
        _ = engine.apply(credit("1"), to: &old, now: Date())
        let key = store.keys.customer("voip", "carol")
        let token = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "2", job: "stale"))
        _ = try await store.redis.send([
            "HSET", key, "doc", String(decoding: try JSONEncoder().encode(old), as: UTF8.self), "v", "4",
            "ev", "1700000000000-0 1700000000001-0", "fence:1", "5", "fence:2", String(token.value + 1),
        ])
        let read = try await store.load(publisher: "voip", customer: "carol")
        #expect(read.state == old && read.version == 4)
        let decision = try await store.update(publisher: "voip", customer: "carol") { engine.apply(credit("3"), to: &$0, now: Date()) }
        #expect(decision.creditBalance == 20)
        #expect(try await store.redis.send(["HKEYS", key]).array?.compactMap(\.string) == ["doc"], "the older fields are gone")
        let record = try StoredCustomer.Record(packed: try #require(try await store.redis.send(["HGET", key, "doc"]).string))
        #expect(record.version == 5 && record.events == "1700000000000-0 1700000000001-0")
        #expect(record.fences == ["1": 5, "2": token.value + 1])
        #expect(record.document.hasPrefix("z1:"))
        let after = try await store.load(publisher: "voip", customer: "carol")
        #expect(after.version == 5 && after.state.credits.balance == 20 && after.state.transactions.count == 2)
        // The fence came along: the holder a later token overtook (written in the older layout) changes nothing.
        await #expect(throws: EntitlementStoreError.self) {
            try await store.update(publisher: "voip", customer: "carol", fence: token) { engine.apply(credit("2"), to: &$0, now: Date()) }
        }
        #expect(try await store.load(publisher: "voip", customer: "carol").state.credits.balance == 20)
        // A store told to write JSON (a rolling upgrade) writes the fields older versions read, fences and all.
        var older = store
        older.format = .json
        let fresh = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "7", job: "fresh"))
        _ = try await older.update(publisher: "voip", customer: "carol", fence: fresh) { engine.apply(credit("7"), to: &$0, now: Date()) }
        let fields = try await store.redis.send(["HGETALL", key]).fieldValues
        #expect(Set(fields.keys) == ["doc", "v", "ev", "fence:1", "fence:2", "fence:7"])
        #expect(fields["doc"]?.hasPrefix("{") == true && fields["v"] == "6" && fields["fence:7"] == String(fresh.value))
        #expect(try await store.load(publisher: "voip", customer: "carol").state.credits.balance == 30)
        // A damaged document is an error that names the customer, not an empty customer; so is a damaged record.
        _ = try await store.redis.send(["HSET", key, "doc", "z1:AAAA"])
        await #expect(throws: EntitlementStoreError.self) { try await store.load(publisher: "voip", customer: "carol") }
        _ = try await store.redis.send(["HSET", key, "doc", "6\nno fences line"])
        await #expect(throws: EntitlementStoreError.self) { try await store.load(publisher: "voip", customer: "carol") }
        await #expect(throws: (any Error).self) {
            try await store.update(publisher: "voip", customer: "carol") { engine.apply(credit("8"), to: &$0, now: Date()) }
        }
    }

    /// A customer of the older layout with more fences than Lua unpacks at once, one of them
    /// for an id the packed record must escape, is packed whole, and each fence still holds.
    @Test func aCustomerWithThousandsOfFencesIsPackedWhole() async throws {
        let store = try await store()
        let locks = TransactionLock(redis: store.redis, prefix: store.prefix)
        var old = CustomerEntitlements(publisher: "voip", customer: "dave")
        _ = engine.apply(credit("1"), to: &old, now: Date())
        let key = store.keys.customer("voip", "dave")
        let odd = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "a b=c", job: "stale"))
        var fields = ["HSET", key, "doc", String(decoding: try JSONEncoder().encode(old), as: UTF8.self), "v", "2"]
        for index in 0..<9_000 { fields += ["fence:\(1_000_000 + index)", "7"] }
        fields += ["fence:a b=c", String(odd.value + 1), "fence:", "9"]
        _ = try await store.redis.send(fields)
        _ = try await store.update(publisher: "voip", customer: "dave") { engine.apply(credit("3"), to: &$0, now: Date()) }
        #expect(try await store.redis.send(["HKEYS", key]).array?.compactMap(\.string) == ["doc"])
        let record = try StoredCustomer.Record(packed: try #require(try await store.redis.send(["HGET", key, "doc"]).string))
        #expect(record.fences.count == 9_002 && record.fences["a%20b%3Dc"] == odd.value + 1 && record.fences["%"] == 9)
        await #expect(throws: EntitlementStoreError.self) {
            try await store.update(publisher: "voip", customer: "dave", fence: odd) { engine.apply(credit("4"), to: &$0, now: Date()) }
        }
        // Written back in the older layout, the fences are named by the ids as older versions name them.
        var older = store
        older.format = .json
        _ = try await older.update(publisher: "voip", customer: "dave") { engine.apply(credit("5"), to: &$0, now: Date()) }
        #expect(try await store.redis.send(["HGET", key, "fence:a b=c"]).string == String(odd.value + 1))
        #expect(try await store.redis.send(["HGET", key, "fence:"]).string == "9")
        #expect(try await store.redis.send(["HLEN", key]).int == 9_004)
        #expect(try await store.load(publisher: "voip", customer: "dave").state.credits.balance == 30)
    }

    /// Transaction ids name their fences in the packed record escaped, so none can break it.
    @Test func fenceNamesKeepTheRecordsSeparatorsOut() throws {
        #expect(StoredCustomer.Record.fenceName("2000000123456789") == "2000000123456789")
        #expect(StoredCustomer.Record.fenceName("a b=c\nd%") == "a%20b%3Dc%0Ad%25")
        #expect(StoredCustomer.Record.fenceName("a-b_c.D9") == "a-b_c.D9")
        for (name, escaped) in [("a%b", "a%25b"), ("a=b", "a%3Db"), ("a b", "a%20b"), ("é", "%C3%A9"), ("\u{212A}", "%E2%84%AA")] {
            #expect(StoredCustomer.Record.fenceName(name) == escaped)
        }
        #expect(StoredCustomer.Record.fenceName("") == "%")
        let record = StoredCustomer.Record(version: 3, events: "1-0 2-0", fences: ["a%20b": 9, "7": 11], document: "z1:AA==")
        #expect(try StoredCustomer.Record(packed: record.packed) == record)
        #expect(throws: (any Error).self) { try StoredCustomer.Record(packed: "0\n\n\nz1:") }
        #expect(throws: (any Error).self) { try StoredCustomer.Record(packed: "3\n\nx\nz1:") }
    }

    /// A snapshot read earlier (with the claim's reads) is taken for the first attempt. Where the
    /// change writes, the compare-and-set refuses it if another writer came between; where it
    /// shows nothing to write, that is judged again on the customer as it is now.
    @Test func aStaleSnapshotNeverDecidesThatNothingIsToBeWritten() async throws {
        let store = try await store()
        _ = try await store.update(publisher: "voip", customer: "erin") { engine.apply(credit("1"), to: &$0, now: Date()) }
        let stale = try await store.readForClaim(publisher: "voip", originalTransactionIds: [], customer: "erin").snapshot
        // Another writer takes the purchase away after the snapshot was read.
        _ = try await store.update(publisher: "voip", customer: "erin") { $0.transactions["1"] = nil }
        #expect(try await store.load(publisher: "voip", customer: "erin").state.transactions["1"] == nil)
        // The same purchase again, from the stale snapshot: on it, nothing changes; on the
        // customer as it is, the purchase is missing and is written back.
        _ = try await store.update(publisher: "voip", customer: "erin", fence: nil, snapshot: stale) {
            engine.apply(credit("1"), to: &$0, now: Date())
        } effects: { _, _, _ in
            EntitlementStore.Change()
        }
        let now = try await store.load(publisher: "voip", customer: "erin")
        #expect(now.state.transactions["1"] != nil && now.version == 3)
    }

    @Test func concurrentWritersAllLand() async throws {
        var store = try await store()
        store.maximumAttempts = 100
        let writer = store
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<24 {
                group.addTask {
                    _ = try await writer.update(publisher: "voip", customer: "busy") { state in
                        engine.apply(credit("t\(index)"), to: &state, now: Date())
                    }
                }
            }
            try await group.waitForAll()
        }
        let (state, version) = try await store.load(publisher: "voip", customer: "busy")
        #expect(state.credits.balance == 240)
        #expect(version == 24)
    }

    @Test func changesArePublishedOnThePublishersChannel() async throws {
        let store = try await store()
        let subscriber = try ChildProcess(
            "/usr/bin/env", ["redis-cli", "-u", try await TestRedis.url(), "--csv", "SUBSCRIBE", store.channel("voip")])
        defer { subscriber.signal(SIGKILL) }
        try await eventually("the subscription") { subscriber.output.contains("subscribe") }
        _ = try await store.update(publisher: "voip", customer: "carol\"quoted") { state in
            engine.apply(credit("c1"), to: &state, now: Date())
        }
        try await eventually("the change event") { subscriber.output.contains(#"\"version\":1}"#) }
        #expect(
            subscriber.output.contains(#"{\"customer\":\"carol\\\"quoted\",\"publisher\":\"voip\",\"version\":1}"#), "\(subscriber.output)")
    }

    @Test func ownersAreClaimedOnceAndMoved() async throws {
        let store = try await store()
        #expect(try await store.claim(publisher: "voip", originalTransactionId: "77", for: "alice") == "alice")
        #expect(try await store.claim(publisher: "voip", originalTransactionId: "77", for: "bob") == "alice")
        try await store.setOwner(publisher: "voip", originalTransactionId: "77", to: "bob")
        #expect(try await store.owner(publisher: "voip", originalTransactionId: "77") == "bob")
        #expect(try await store.owner(publisher: "other", originalTransactionId: "77") == nil)
    }

    /// Apple's word on a purchase nobody holds: a refund is kept, a view that is no refund
    /// only when it is newer word on a transaction kept already (a reversal), never an older
    /// one; a claim's read returns what is kept, and the claim forgets it.
    @Test func aRefundNobodyHoldsIsKeptForTheClaimNewestSignedFirst() async throws {
        let store = try await store()
        let signed = Date(timeIntervalSince1970: 1_790_000_000)
        func view(_ id: String, signedAt offset: TimeInterval, refunded: Bool) -> PurchaseFact {
            var fact = credit(id)
            fact.signedDate = signed.addingTimeInterval(offset)
            fact.revocationDate = refunded ? signed : nil
            return fact
        }
        func kept() async throws -> [String: Bool] {
            let facts = try await store.unheldFacts(publisher: "voip", originalTransactionIds: ["5", "6"])
            return Dictionary(uniqueKeysWithValues: facts.map { ($0.transactionId, $0.revocationDate != nil) })
        }
        #expect(try await !store.keepUnheld([view("5", signedAt: 0, refunded: false)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "5") == (held: false, kept: false))
        // Another purchase's fact is not this one's to keep.
        #expect(try await !store.keepUnheld([view("6", signedAt: 0, refunded: true)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await store.keepUnheld([view("5", signedAt: 10, refunded: true)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "5") == (held: false, kept: true))
        #expect(try await !store.keepUnheld([view("5", signedAt: 5, refunded: false)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await kept() == ["5": true], "an older view does not undo the refund")
        #expect(try await store.keepUnheld([view("5", signedAt: 20, refunded: false)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await kept() == ["5": false], "the reversal, newer, replaces it")
        #expect(try await store.keepUnheld([view("5", signedAt: 30, refunded: true)], publisher: "voip", originalTransactionId: "5"))
        // Signed in the same millisecond, the refund stands (`PurchaseFact.outranks`).
        #expect(try await !store.keepUnheld([view("5", signedAt: 30, refunded: false)], publisher: "voip", originalTransactionId: "5"))
        #expect(try await kept() == ["5": true])

        // A refund job's view is kept whatever it says: a reversal told first outranks its refund.
        #expect(
            try await store.keepUnheld(
                [view("6", signedAt: 20, refunded: false)], publisher: "voip", originalTransactionId: "6", views: true))
        #expect(try await !store.keepUnheld([view("6", signedAt: 10, refunded: true)], publisher: "voip", originalTransactionId: "6"))
        #expect(try await kept() == ["5": true, "6": false])
        // Written only over what the keeper read: a view another keeper set meanwhile stands.
        let key = store.keys.unheldFacts("voip", "6")
        let current = try #require(try await store.redis.send(["HGET", key, "6"]).string)
        let changed = try await store.redis.run(EntitlementStore.keepIfUnchanged, keys: [key], arguments: ["0", "6", "", "{}"])
        #expect(changed.int == 0)
        #expect(try await store.redis.send(["HGET", key, "6"]).string == current)
        #expect(try await store.redis.run(EntitlementStore.keepIfUnchanged, keys: [key], arguments: ["0", "6", current, current]).int == 1)

        let read = try await store.readForClaim(publisher: "voip", originalTransactionIds: ["5", "6"], customer: "alice")
        #expect(read.unheld.map(\.transactionId).sorted() == ["5", "6"] && read.owners.isEmpty)
        #expect(read.unheld.first { $0.transactionId == "5" }?.revocationDate != nil)
        #expect(try await store.holdersAndKept(publisher: "voip", originalTransactionId: "5").holders.isEmpty)
        _ = try await store.claim(publisher: "voip", originalTransactionId: "5", for: "alice")
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "5") == (held: true, kept: true))
        // Who holds it, and what is kept for them, in one read: a job telling Apple's word to
        // the holders takes what is kept along.
        _ = try await store.redis.send(["SADD", store.keys.sharers("voip", "5"), "bob", "alice"])
        let standing = try await store.holdersAndKept(publisher: "voip", originalTransactionId: "5")
        #expect(standing.holders == ["alice", "bob"])
        #expect(standing.kept.map(\.transactionId) == ["5"] && standing.kept.first?.revocationDate != nil)
        try await store.forgetUnheld(publisher: "voip", originalTransactionIds: ["5", "6"])
        #expect(try await kept().isEmpty)
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "5") == (held: true, kept: false))
        #expect(try await store.readForClaim(publisher: "voip", originalTransactionIds: ["5"], customer: "alice").unheld.isEmpty)
    }

    /// Claims under locks nobody took since (no fence key: the first token handed out is larger).
    static func unlocked(_ ids: [String]) -> [TransactionLock.Token] {
        ids.map { TransactionLock.Token(originalTransactionId: $0, value: 1) }
    }

    /// A job whose lease ran out before it claimed (a later job took the purchase's lock, and
    /// may have kept Apple's word for whoever claims it) claims nothing: in the write, apart
    /// with nothing to write, or apart before a write. Its next run, under the lock again, does.
    @Test func aClaimIsRefusedOnceALaterJobTookThePurchasesLock() async throws {
        let store = try await store()
        #expect(store.claimsInWrite)
        let locks = TransactionLock(redis: store.redis, prefix: store.prefix, lease: .seconds(30))
        let first = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "F1", job: "job-a"))
        // job-a's lease runs out; job-b takes the lock.
        _ = try await store.redis.send(["DEL", store.keys.lock("voip", "F1")])
        let later = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "F1", job: "job-b"))
        #expect(later.value > first.value)
        let events = store.keys.events("voip", customer: "dora")

        let inWrite = await #expect(throws: EntitlementStoreError.self) {
            _ = try await store.update(publisher: "voip", customer: "dora", fence: nil, claiming: [first]) { state in
                engine.apply(self.credit("F1"), to: &state, now: Date())
            } effects: { _, _, _ in
                EntitlementStore.Change()
            }
        }
        #expect(inWrite?.code == .fenced)
        let nothingToWrite = await #expect(throws: EntitlementStoreError.self) {
            _ = try await store.update(publisher: "voip", customer: "dora", fence: nil, claiming: [first]) { _ in
            } effects: { _, _, _ in
                EntitlementStore.Change()
            }
        }
        #expect(nothingToWrite?.code == .fenced)
        let apart = await #expect(throws: EntitlementStoreError.self) {
            try await store.claim(publisher: "voip", locked: [first], for: "dora")
        }
        #expect(apart?.code == .fenced)
        #expect(try await store.owner(publisher: "voip", originalTransactionId: "F1") == nil)
        // Nor does it keep Apple's word for whoever claims: a run whose lease ran out is not
        // run again, and a view it kept after a claim would outlive it.
        var refund = credit("F1")
        refund.revocationDate = Date()
        let kept = await #expect(throws: EntitlementStoreError.self) {
            try await store.keepUnheld([refund], publisher: "voip", originalTransactionId: "F1", lock: first)
        }
        #expect(kept?.code == .fenced)
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "F1") == (held: false, kept: false))
        #expect(try await store.keepUnheld([refund], publisher: "voip", originalTransactionId: "F1", lock: later))
        try await store.forgetUnheld(publisher: "voip", originalTransactionIds: ["F1"])
        #expect(try await store.load(publisher: "voip", customer: "dora").version == 0)
        #expect(try await store.redis.send(["EXISTS", events]).int == 0)

        // Under the lock's newest token the claim is made, in the write with the document.
        _ = try await store.update(publisher: "voip", customer: "dora", fence: nil, claiming: [later]) { state in
            engine.apply(self.credit("F1"), to: &state, now: Date())
        } effects: { _, _, _ in
            EntitlementStore.Change()
        }
        #expect(try await store.owner(publisher: "voip", originalTransactionId: "F1") == "dora")
        #expect(try await store.load(publisher: "voip", customer: "dora").version == 1)
        #expect(try await store.claim(publisher: "voip", locked: [later], for: "erin") == ["F1": "dora"])
        // What a keeper reads after keeping: the holder, and whether its lock passed on.
        #expect(try await store.afterKeeping(publisher: "voip", lock: first) == (held: true, lockPassedOn: true))
        #expect(try await store.afterKeeping(publisher: "voip", lock: later) == (held: true, lockPassedOn: false))
        let unheld = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "F3", job: "job-e"))
        #expect(try await store.afterKeeping(publisher: "voip", lock: unheld) == (held: false, lockPassedOn: false))

        // Where the claims go apart (an address announced as sharded, a cluster), the fence is
        // read after the claim: the stale job is told to run again (as the holder, it then
        // reads what was kept), and writes nothing.
        var announcedConfiguration = try await TestRedis.configuration()
        announcedConfiguration.sharded = true
        let announced = EntitlementStore(
            redis: RedisConnectionPool(configuration: announcedConfiguration, logger: TestRedis.logger), prefix: store.prefix,
            logger: TestRedis.logger)
        defer { announced.redis.close() }
        #expect(!announced.claimsInWrite)
        let stale = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "F2", job: "job-c"))
        _ = try await store.redis.send(["DEL", store.keys.lock("voip", "F2")])
        let fresh = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "F2", job: "job-d"))
        let apartThenChecked = await #expect(throws: EntitlementStoreError.self) {
            _ = try await announced.update(publisher: "voip", customer: "frank", fence: nil, claiming: [stale]) { state in
                engine.apply(self.credit("F2"), to: &state, now: Date())
            } effects: { _, _, _ in
                EntitlementStore.Change()
            }
        }
        #expect(apartThenChecked?.code == .fenced)
        #expect(try await store.owner(publisher: "voip", originalTransactionId: "F2") == "frank")
        #expect(try await store.load(publisher: "voip", customer: "frank").version == 0)
        #expect(try await announced.claim(publisher: "voip", locked: [fresh], for: "frank") == ["F2": "frank"])
        // There too the keeping reads the fence in its script (what is kept sits in the
        // fence's slot): a stale job keeps nothing.
        var lateRefund = credit("F2")
        lateRefund.revocationDate = Date()
        let keptApart = await #expect(throws: EntitlementStoreError.self) {
            try await announced.keepUnheld([lateRefund], publisher: "voip", originalTransactionId: "F2", lock: stale)
        }
        #expect(keptApart?.code == .fenced)
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "F2") == (held: true, kept: false))
        #expect(try await announced.afterKeeping(publisher: "voip", lock: stale) == (held: true, lockPassedOn: true))
    }

    /// On a server that refuses a script's keys across slots (a cluster's node), what is kept
    /// for a purchase shares its fence's slot: the keeping checks the fence there too, and a
    /// stale job keeps nothing.
    @Test func keepingIsFencedOnAServerThatShards() async throws {
        let shard = try await LocalRedisCluster.startOneNode()
        do {
            let store = EntitlementStore(
                redis: RedisConnectionPool(
                    configuration: try RedisConfiguration(url: "redis://\(shard.nodes[0].address)"), logger: TestRedis.logger),
                prefix: TestRedis.uniquePrefix("keep-shard"), logger: TestRedis.logger)
            defer { store.redis.close() }
            let locks = TransactionLock(redis: store.redis, prefix: store.prefix, lease: .seconds(30))
            let stale = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "K1", job: "job-a"))
            _ = try await store.redis.send(["DEL", store.keys.lock("voip", "K1")])
            let fresh = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "K1", job: "job-b"))
            var refund = credit("K1")
            refund.revocationDate = Date()
            let fenced = await #expect(throws: EntitlementStoreError.self) {
                try await store.keepUnheld([refund], publisher: "voip", originalTransactionId: "K1", lock: stale)
            }
            #expect(fenced?.code == .fenced)
            #expect(try await store.standing(publisher: "voip", originalTransactionId: "K1") == (held: false, kept: false))
            #expect(try await store.keepUnheld([refund], publisher: "voip", originalTransactionId: "K1", lock: fresh))
            #expect(try await store.unheldFacts(publisher: "voip", originalTransactionIds: ["K1"]).map(\.transactionId) == ["K1"])
        } catch {
            Issue.record("\(error)")
        }
        await shard.stop()
    }

    /// What versions before 2026-11-28 kept under the key outside the fence's slot is read
    /// by every reader, moved by the purchase's next keeping (the newest signed view of each
    /// transaction standing), and forgotten with the rest; during a rolling upgrade a worker
    /// keeps there instead.
    @Test func viewsKeptUnderTheLegacyKeyAreReadAndMoved() async throws {
        let store = try await store()
        let signed = Date(timeIntervalSince1970: 1_790_000_000)
        func view(_ id: String, signedAt offset: TimeInterval, refunded: Bool) -> PurchaseFact {
            var fact = credit(id)
            fact.originalTransactionId = "L1"
            fact.signedDate = signed.addingTimeInterval(offset)
            fact.revocationDate = refunded ? signed : nil
            return fact
        }
        func text(_ fact: PurchaseFact) throws -> String { String(decoding: try JSONEncoder().encode(fact), as: UTF8.self) }
        func kept() async throws -> [String: Bool] {
            let facts = try await store.unheldFacts(publisher: "voip", originalTransactionIds: ["L1"])
            return Dictionary(facts.map { ($0.transactionId, $0.revocationDate != nil) }) { _, _ in
                Issue.record("a transaction read twice")
                return false
            }
        }
        let legacy = store.keys.legacyUnheldFacts("voip", "L1")
        let current = store.keys.unheldFacts("voip", "L1")
        #expect(legacy != current)
        // An earlier version kept two refunds.
        _ = try await store.redis.send([
            "HSET", legacy, "t1", try text(view("t1", signedAt: 10, refunded: true)), "t2",
            try text(view("t2", signedAt: 10, refunded: true)),
        ])
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "L1") == (held: false, kept: true))
        #expect(try await kept() == ["t1": true, "t2": true])
        let read = try await store.readForClaim(publisher: "voip", originalTransactionIds: ["L1"], customer: "gina")
        #expect(read.unheld.map(\.transactionId).sorted() == ["t1", "t2"])
        #expect(try await store.holdersAndKept(publisher: "voip", originalTransactionId: "L1").kept.count == 2)

        // An older view does not undo a legacy refund: it moves as it was.
        #expect(try await !store.keepUnheld([view("t1", signedAt: 5, refunded: false)], publisher: "voip", originalTransactionId: "L1"))
        #expect(try await store.redis.send(["EXISTS", legacy]).int == 0)
        #expect(try await store.redis.send(["HLEN", current]).int == 2)
        #expect(try await kept() == ["t1": true, "t2": true])

        // Found beside a newer view under the new key, a legacy view it outranks does not move.
        _ = try await store.redis.send(["HSET", legacy, "t2", try text(view("t2", signedAt: 5, refunded: true))])
        _ = try await store.redis.send(["HSET", current, "t2", try text(view("t2", signedAt: 20, refunded: false))])
        #expect(try await store.keepUnheld([view("t3", signedAt: 30, refunded: true)], publisher: "voip", originalTransactionId: "L1"))
        #expect(try await store.redis.send(["EXISTS", legacy]).int == 0)
        #expect(try await kept() == ["t1": true, "t2": false, "t3": true])

        // One view a transaction is read where both keys hold one (a keeper stopped before it
        // forgot what it moved, or both versions kept during an upgrade): the one that outranks.
        _ = try await store.redis.send(["HSET", legacy, "t2", try text(view("t2", signedAt: 25, refunded: true))])
        #expect(try await kept() == ["t1": true, "t2": true, "t3": true])
        let claimRead = try await store.readForClaim(publisher: "voip", originalTransactionIds: ["L1"], customer: "gina")
        #expect(claimRead.unheld.filter { $0.transactionId == "t2" }.map(\.signedDate) == [signed.addingTimeInterval(25)])

        // What moved is forgotten where it is still what was read: a view another version
        // kept there meanwhile stays.
        let moved = try await store.redis.send(["HGET", legacy, "t2"]).string ?? ""
        let newer = try text(view("t2", signedAt: 40, refunded: false))
        _ = try await store.redis.send(["HSET", legacy, "t2", newer])
        _ = try await store.redis.run(EntitlementStore.forgetIfUnchanged, keys: [legacy], arguments: ["t2", moved]).checked()
        #expect(try await store.redis.send(["HGET", legacy, "t2"]).string == newer)
        _ = try await store.redis.run(EntitlementStore.forgetIfUnchanged, keys: [legacy], arguments: ["t2", newer]).checked()
        #expect(try await store.redis.send(["EXISTS", legacy]).int == 0)

        _ = try await store.redis.send(["HSET", legacy, "t4", try text(view("t4", signedAt: 10, refunded: true))])
        try await store.forgetUnheld(publisher: "voip", originalTransactionIds: ["L1"])
        #expect(try await store.redis.send(["EXISTS", legacy, current]).int == 0)
        #expect(try await store.standing(publisher: "voip", originalTransactionId: "L1") == (held: false, kept: false))

        // Of two views of one transaction, the tagged key's stands where it outranks.
        _ = try await store.redis.send(["HSET", current, "t8", try text(view("t8", signedAt: 30, refunded: false))])
        _ = try await store.redis.send(["HSET", legacy, "t8", try text(view("t8", signedAt: 20, refunded: true))])
        #expect(try await kept() == ["t8": false])
        try await store.forgetUnheld(publisher: "voip", originalTransactionIds: ["L1"])

        // During a rolling upgrade (`ENTITLE_UNHELD_KEY=legacy`) a worker keeps under the
        // legacy key, which the older version reads, copies there what the tagged key holds
        // (never taking it away: a worker of the other mode may rely on it), and on one
        // server still checks the fence. A copy alone counts as kept.
        var rollout = store
        rollout.unheldKey = .legacy
        _ = try await store.redis.send(["HSET", current, "t5", try text(view("t5", signedAt: 10, refunded: true))])
        #expect(try await rollout.keepUnheld([view("t6", signedAt: 10, refunded: true)], publisher: "voip", originalTransactionId: "L1"))
        #expect(try await store.redis.send(["HKEYS", current]).array?.compactMap(\.string) == ["t5"])
        #expect(try await store.redis.send(["HKEYS", legacy]).array?.compactMap(\.string).sorted() == ["t5", "t6"])
        _ = try await store.redis.send(["HDEL", legacy, "t5"])
        #expect(try await rollout.keepUnheld([], publisher: "voip", originalTransactionId: "L1"), "copied")
        #expect(try await !rollout.keepUnheld([], publisher: "voip", originalTransactionId: "L1"), "nothing left to copy")
        #expect(try await store.redis.send(["HLEN", current]).int == 1)
        let locks = TransactionLock(redis: store.redis, prefix: store.prefix, lease: .seconds(30))
        let stale = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "L1", job: "job-a"))
        _ = try await store.redis.send(["DEL", store.keys.lock("voip", "L1")])
        let fresh = try #require(try await locks.acquire(publisher: "voip", originalTransactionId: "L1", job: "job-b"))
        let fenced = await #expect(throws: EntitlementStoreError.self) {
            try await rollout.keepUnheld(
                [view("t7", signedAt: 10, refunded: true)], publisher: "voip", originalTransactionId: "L1", lock: stale)
        }
        #expect(fenced?.code == .fenced)
        #expect(
            try await rollout.keepUnheld(
                [view("t7", signedAt: 10, refunded: true)], publisher: "voip", originalTransactionId: "L1", lock: fresh))
        #expect(try await kept() == ["t5": true, "t6": true, "t7": true])
        // Back on the tagged key, the next keeping moves it all there.
        #expect(try await !store.keepUnheld([], publisher: "voip", originalTransactionId: "L1", lock: fresh))
        #expect(try await store.redis.send(["EXISTS", legacy]).int == 0)
        #expect(try await store.redis.send(["HLEN", current]).int == 3)
        try await store.forgetUnheld(publisher: "voip", originalTransactionIds: ["L1"])

        #expect(try await AppStoreHostTests.settings([:]).unheldKey == .tagged)
        #expect(try await AppStoreHostTests.settings(["ENTITLE_UNHELD_KEY": "legacy"]).unheldKey == .legacy)
        await #expect(throws: WorkerError.self) { try await AppStoreHostTests.settings(["ENTITLE_UNHELD_KEY": "old"]) }
    }

    /// Off a cluster a purchase is claimed in the customer's write: the claims and the
    /// document (its holder indexes too) land together or not at all, and a purchase another
    /// customer holds leaves everything as it was (`claimTaken`), the events too. A change
    /// with nothing to write still claims. Behind an address announced as sharded, or once a
    /// server that shards refused the write's keys across slots, the store claims apart,
    /// before the write, with the same outcomes.
    @Test func claimsInTheWriteLandWithTheDocumentOrNotAtAll() async throws {
        let clusterStore = EntitlementStore(
            redis: RedisConnectionPool(configuration: try RedisConfiguration(url: "redis+cluster://127.0.0.1:1"), logger: TestRedis.logger),
            logger: TestRedis.logger)
        #expect(!clusterStore.claimsInWrite)
        let store = try await store()
        #expect(store.claimsInWrite)
        try await claimsLandWithTheDocumentOrNotAtAll(store, inWrite: true)
        #expect(store.claimsInWrite)
        try await locksGoWithALastWriteThatLeavesNothingToClose(store, inWrite: true)

        // Announced as sharded (`?sharded=yes`), the store claims apart from the start.
        var announcedConfiguration = try await TestRedis.configuration()
        announcedConfiguration.sharded = true
        let announced = EntitlementStore(
            redis: RedisConnectionPool(configuration: announcedConfiguration, logger: TestRedis.logger),
            prefix: TestRedis.uniquePrefix("announced"), logger: TestRedis.logger)
        #expect(!announced.claimsInWrite)
        try await claimsLandWithTheDocumentOrNotAtAll(announced, inWrite: false)
        try await locksGoWithALastWriteThatLeavesNothingToClose(announced, inWrite: false)
        announced.redis.close()

        let shard = try await LocalRedisCluster.startOneNode()
        do {
            let sharded = EntitlementStore(
                redis: RedisConnectionPool(
                    configuration: try RedisConfiguration(url: "redis://\(shard.nodes[0].address)"), logger: TestRedis.logger),
                prefix: TestRedis.uniquePrefix("shard"), logger: TestRedis.logger)
            #expect(sharded.claimsInWrite)
            try await claimsLandWithTheDocumentOrNotAtAll(sharded, inWrite: false)
            #expect(!sharded.claimsInWrite, "the server's refusal turned the claim in the write off")
            sharded.redis.close()
            // Refused for the locks alone (no claim), the write is made again without them.
            let releasing = EntitlementStore(
                redis: RedisConnectionPool(
                    configuration: try RedisConfiguration(url: "redis://\(shard.nodes[0].address)"), logger: TestRedis.logger),
                prefix: TestRedis.uniquePrefix("shard-locks"), logger: TestRedis.logger)
            try await locksGoWithALastWriteThatLeavesNothingToClose(releasing, inWrite: false)
            #expect(!releasing.claimsInWrite)
            releasing.redis.close()
        } catch {
            Issue.record("\(error)")
        }
        await shard.stop()
    }

    /// A job's locks offered to its last write (`update(releasing:)`) are released by it where
    /// `inWrite` (one server), and only when it leaves nothing to deliver or close; otherwise
    /// they stay for the job's own release.
    func locksGoWithALastWriteThatLeavesNothingToClose(_ store: EntitlementStore, inWrite: Bool) async throws {
        let locks = TransactionLock(redis: store.redis, prefix: store.prefix, lease: .seconds(30))
        func write(_ lock: TransactionLock.Token, closing: ClosingWrites, followUp: Bool = false) async throws -> Int {
            let id = lock.originalTransactionId
            // With an event, a claim and a holder index moved: every part of the script at once.
            _ = try await store.update(
                publisher: "voip", customer: "carol", fence: nil, claiming: [lock], releasing: closing,
                { state in
                    engine.apply(self.credit(id), to: &state, now: Date())
                    state.periods.append(
                        AccessPeriod(
                            transactionId: "p\(id)", originalTransactionId: "p\(id)", offerId: "premium", productId: "premium",
                            entitlements: ["premium"], start: Date(timeIntervalSince1970: 1_790_000_000),
                            end: Date(timeIntervalSince1970: 1_790_000_000 + Double(id.utf8.last ?? 0) * 86_400)))
                },
                effects: { _, _, version in
                    var event = LifecycleEvent(
                        id: "voip:carol:credits_granted:\(id)", type: .creditsGranted, publisher: "voip", customer: "carol",
                        occurredAt: Date(), recordedAt: Date())
                    (event.transactionId, event.customerVersion, event.amount) = (id, version, 10)
                    let webhook = try FollowUpJob(id: "webhook:\(id)", JobPayloads.Webhook(publisher: "voip", event: "{}", eventId: id))
                    return EntitlementStore.Change(events: [event], followUps: followUp ? [webhook] : [])
                })
            #expect(try await store.owner(publisher: "voip", originalTransactionId: id) == "carol")
            #expect(try await store.holders(publisher: "voip", entitlement: "premium", after: 0).contains("carol"))
            let version = try await store.load(publisher: "voip", customer: "carol").version
            #expect(try await store.redis.send(["XLEN", store.keys.events("voip", customer: "carol")]).int == version)
            return version
        }
        func held(_ id: String) async throws -> Bool {
            try await store.redis.send(["EXISTS", store.keys.lock("voip", id)]).int == 1
        }
        func offered(_ ids: [String], job: String) async throws -> (ClosingWrites, [TransactionLock.Token]) {
            var tokens: [TransactionLock.Token] = []
            for id in ids { tokens.append(try #require(try await locks.acquire(publisher: "voip", originalTransactionId: id, job: job))) }
            let closing = ClosingWrites()
            closing.offer(locks: locks.releaseInWrite(tokens, publisher: "voip", job: job))
            return (closing, tokens)
        }

        // Nothing follows the write: both locks go with it (one server), or stay.
        let (first, firstTokens) = try await offered(["L1", "L2"], job: "job-1")
        #expect(try await write(firstTokens[0], closing: first) == 1)
        #expect(first.released == inWrite)
        #expect(try await held("L1") == !inWrite)
        #expect(try await held("L2") == !inWrite)
        if !inWrite { #expect(try await locks.release(firstTokens, publisher: "voip", job: "job-1", with: first).isEmpty) }

        // A follow-up job to deliver after the write: the locks stay for the release after it.
        let (second, secondTokens) = try await offered(["L3"], job: "job-2")
        #expect(try await write(secondTokens[0], closing: second, followUp: true) == 2)
        #expect(!second.released)
        #expect(try await held("L3"))
        try await store.clear(outbox: ["webhook:L3"], publisher: "voip", customer: "carol")
        #expect(try await locks.release(secondTokens, publisher: "voip", job: "job-2", with: second).isEmpty)

        // A lock that passed to another job meanwhile is left to it.
        let (third, thirdTokens) = try await offered(["L4"], job: "job-3")
        _ = try await store.redis.send(["SET", store.keys.lock("voip", "L4"), "job-4:\(thirdTokens[0].value + 1)"])
        #expect(try await write(thirdTokens[0], closing: third) == 3)
        #expect(try await store.redis.send(["GET", store.keys.lock("voip", "L4")]).string == "job-4:\(thirdTokens[0].value + 1)")
        #expect(!third.released, "not this job's to release: its own release is still sent, and finds it gone")
        _ = try await store.redis.send(["DEL", store.keys.lock("voip", "L4")])
    }

    /// `inWrite`: the claims go in the write (all or none), else apart (one by one, as on a cluster).
    func claimsLandWithTheDocumentOrNotAtAll(_ store: EntitlementStore, inWrite: Bool) async throws {
        func buy(_ id: String, claiming: [String]) async throws {
            _ = try await store.update(
                publisher: "voip", customer: "alice", fence: nil, claiming: Self.unlocked(claiming),
                { state in
                    engine.apply(self.credit(id), to: &state, now: Date())
                    // A period too, so the write moves the holder indexes beside the claims.
                    state.periods.append(
                        AccessPeriod(
                            transactionId: "p\(id)", originalTransactionId: "p\(id)", offerId: "premium", productId: "premium",
                            entitlements: ["premium"], start: Date(timeIntervalSince1970: 1_790_000_000), end: nil))
                },
                effects: { _, _, version in
                    var event = LifecycleEvent(
                        id: "voip:alice:credits_granted:\(id)", type: .creditsGranted, publisher: "voip", customer: "alice",
                        occurredAt: Date(), recordedAt: Date())
                    (event.transactionId, event.customerVersion, event.amount) = (id, version, 10)
                    return EntitlementStore.Change(events: [event])
                })
        }
        func owner(_ id: String) async throws -> String? { try await store.owner(publisher: "voip", originalTransactionId: id) }
        func holders() async throws -> [String] { try await store.holders(publisher: "voip", entitlement: "premium", after: 0) }
        let events = store.keys.events("voip", customer: "alice")

        try await buy("1", claiming: ["1", "2"])
        #expect(try await owner("1") == "alice")
        #expect(try await owner("2") == "alice")
        #expect(try await store.redis.send(["XLEN", events]).int == 1)
        #expect(try await holders() == ["alice"])

        // One held by bob: nothing is written; in the write the free one is not claimed either.
        #expect(try await store.claim(publisher: "voip", originalTransactionId: "3", for: "bob") == "bob")
        let taken = await #expect(throws: EntitlementStoreError.self) { try await buy("3", claiming: ["4", "3"]) }
        #expect(taken?.code == .claimTaken)
        #expect(try await owner("4") == (inWrite ? nil : "alice"))
        #expect(try await owner("3") == "bob")
        let (state, version) = try await store.load(publisher: "voip", customer: "alice")
        #expect(version == 1)
        #expect(state.credits.balance == 10)
        #expect(state.periods.map(\.transactionId) == ["p1"])
        #expect(try await store.redis.send(["XLEN", events]).int == 1)

        // Nothing to write (credit 1 again) still claims, and still refuses one bob holds.
        _ = try await store.update(publisher: "voip", customer: "alice", fence: nil, claiming: Self.unlocked(["5"])) { state in
            engine.apply(self.credit("1"), to: &state, now: Date())
        } effects: { _, _, _ in
            EntitlementStore.Change()
        }
        #expect(try await owner("5") == "alice")
        let stillTaken = await #expect(throws: EntitlementStoreError.self) {
            _ = try await store.update(publisher: "voip", customer: "alice", fence: nil, claiming: Self.unlocked(["3"])) { state in
                engine.apply(self.credit("1"), to: &state, now: Date())
            } effects: { _, _, _ in
                EntitlementStore.Change()
            }
        }
        #expect(stillTaken?.code == .claimTaken)
        #expect(try await owner("3") == "bob")
        #expect(try await store.load(publisher: "voip", customer: "alice").version == 1)
    }
}
