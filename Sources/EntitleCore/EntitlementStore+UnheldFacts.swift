import Entitlements
import Foundation
import RedisClient

/// Apple's word about a purchase nobody holds yet. A refund Apple tells before any customer
/// claimed the purchase reaches nobody, and a signed transaction from before it (what the app
/// kept) does not show it: claimed later with that transaction, the purchase would give access
/// Apple took back. So what Apple signed about such a purchase (a refund or revocation, and
/// anything newer about a transaction kept already, such as its reversal) is kept here, under
/// the purchase's lock, and a claim reads it under the same lock (`ClaimRead.unheld`) and
/// merges it, the newest signed view of each transaction winning. Once a customer holds the
/// purchase, Apple's word reaches them directly, and the claim forgets what was kept. A view
/// kept as a claim came (its keeper finds a holder when it reads after keeping) goes to the
/// holders with the next refund or notification job that tells them Apple's word
/// (`holdersAndKept`), the keeper's own next run first, which forgets it too.
///
/// One hash per purchase (`EntitlementKeys.unheldFacts`): transaction id to its signed view,
/// as JSON. Kept until a claim, or until a job tells the holders: only refunded purchases
/// nobody claimed have one for long. Versions before 2026-11-28 kept it under a key outside
/// the fence's slot (`legacyUnheldFacts`): every reader reads both, the next keeping moves
/// what it finds there (while `unheldKey` is `.legacy`, during a rolling upgrade, it copies
/// the other way), and forgetting deletes both.
extension EntitlementStore {
    func unheldFactsKey(_ publisher: String, _ originalTransactionId: String) -> String {
        keys.unheldFacts(publisher, originalTransactionId)
    }

    /// The reads of what is kept for a purchase, one key a command (Redis Cluster): its
    /// `HVALS` under both keys, which `unheldFacts(in:)` reads together.
    func unheldFactsReads(_ publisher: String, _ originalTransactionId: String) -> [[String]] {
        [
            ["HVALS", unheldFactsKey(publisher, originalTransactionId)],
            ["HVALS", keys.legacyUnheldFacts(publisher, originalTransactionId)],
        ]
    }

    /// What is kept for these purchases.
    package func unheldFacts(publisher: String, originalTransactionIds: some Collection<String>) async throws -> [PurchaseFact] {
        let sorted = originalTransactionIds.sorted()
        guard !sorted.isEmpty else { return [] }
        let replies = try await redis.pipeline(sorted.flatMap { unheldFactsReads(publisher, $0) })
        return try Self.unheldFacts(in: replies)
    }

    /// Whether a customer holds the purchase, and whether anything is kept for it (Apple's
    /// newer word about it must be kept too), in one round trip.
    package func standing(publisher: String, originalTransactionId: String) async throws -> (held: Bool, kept: Bool) {
        // One key a command: Redis Cluster.
        let replies = try await redis.pipeline([
            ["GET", ownerKey(publisher, originalTransactionId)], ["EXISTS", unheldFactsKey(publisher, originalTransactionId)],
            ["EXISTS", keys.legacyUnheldFacts(publisher, originalTransactionId)],
        ])
        let (owner, kept, legacy) = (try replies[0].checked(), try replies[1].checked(), try replies[2].checked())
        return (owner.string != nil, kept.int == 1 || legacy.int == 1)
    }

    /// Who holds the purchase (its owner first, then those sharing it) and Apple's word kept
    /// for it while nobody did, in one round trip. Read under the purchase's lock by a job
    /// that tells Apple's word to the holders: what is kept goes to them with it (newest
    /// signed view winning), and is then forgotten (`forgetUnheld`). A keeper that found the
    /// purchase claimed as it kept runs again and comes this way; what it kept, left behind,
    /// would outlive the claim, and a customer sharing the purchase later would merge a
    /// refund whose reversal reached the holders directly.
    package func holdersAndKept(publisher: String, originalTransactionId: String) async throws -> (holders: [String], kept: [PurchaseFact])
    {
        // One key a command: Redis Cluster.
        let replies = try await redis.pipeline(
            [["GET", ownerKey(publisher, originalTransactionId)], ["SMEMBERS", sharersKey(publisher, originalTransactionId)]]
                + unheldFactsReads(publisher, originalTransactionId))
        let kept = try Self.unheldFacts(in: replies[2...])
        guard let owner = try replies[0].checked().string else { return ([], kept) }
        return (Self.holders(owner: owner, sharers: try replies[1].checked()), kept)
    }

    /// Keeps, of `facts`, those about `originalTransactionId` that a claim must not miss: a
    /// refund or revocation, and a view that outranks one kept already of the same transaction
    /// (`PurchaseFact.outranks`: signed later, or in the same millisecond unless only the kept
    /// one carries a revocation); with `views`, any view when none of its transaction is kept
    /// (a reversal told before its refund, which then does not outrank it). Called under the
    /// purchase's lock (`lock`), nobody holding it: nothing is kept once a later job took the
    /// lock (`EntitlementStoreError.fenced`): a run of a job taken back from its worker is not
    /// run again, and could otherwise keep a view after a claim and the holders' next news.
    /// Written under the key `unheldKey` names: `.tagged` moves there what the legacy key
    /// holds; `.legacy`, for a rolling upgrade, copies there what the tagged key holds and
    /// checks the fence only where one script may name keys of two slots (`claimsInWrite`).
    /// Returns whether anything of `facts` was written (`.legacy`: anything at all).
    package func keepUnheld(
        _ facts: [PurchaseFact], publisher: String, originalTransactionId: String, views: Bool = false,
        lock: TransactionLock.Token? = nil
    ) async throws -> Bool {
        let (tagged, legacy) = (unheldFactsKey(publisher, originalTransactionId), keys.legacyUnheldFacts(publisher, originalTransactionId))
        let (key, other) = unheldKey == .tagged ? (tagged, legacy) : (legacy, tagged)
        let encoder = JSONEncoder()
        // Decided on what is kept, and written only if it is still that: a keeper whose lease
        // ran out must not overwrite a newer view another kept meanwhile.
        for _ in 1...maximumAttempts {
            // One key a command: Redis Cluster.
            let replies = try await redis.pipeline([["HGETALL", key], ["HGETALL", other]])
            let kept = try Self.keptViews(in: replies[0])
            let moving = try Self.keptViews(in: replies[1])
            // What each transaction's entry becomes: a view under the other key comes over where
            // it outranks (or there is no) entry here, then the job's own views are weighed.
            var chosen = kept
            for (transaction, view) in moving where chosen[transaction].map({ view.fact.outranks($0.fact) }) ?? true {
                chosen[transaction] = view
            }
            var told: Set<String> = []
            for fact in facts where fact.originalTransactionId == originalTransactionId {
                let old = chosen[fact.transactionId]
                guard views || fact.revocationDate != nil || old != nil else { continue }
                if let old, !fact.outranks(old.fact) { continue }
                chosen[fact.transactionId] = (String(decoding: try encoder.encode(fact), as: UTF8.self), fact)
                told.insert(fact.transactionId)
            }
            var changes: [String] = []
            var keptAny = false
            for (transaction, view) in chosen.sorted(by: { $0.key < $1.key }) where view.text != kept[transaction]?.text {
                changes += [transaction, kept[transaction]?.text ?? "", view.text]
                keptAny = keptAny || told.contains(transaction)
            }
            if !changes.isEmpty {
                switch try await keepIfUnchanged(changes, key: key, publisher: publisher, lock: lock).int {
                case 1: break
                case -3:
                    throw EntitlementStoreError(
                        .fenced, "the lock on \(originalTransactionId) passed to a later job before this one kept Apple's word on it")
                default: continue
                }
            }
            switch unheldKey {
            case .tagged where !moving.isEmpty:
                // What moved is here now, or outranked here: gone from the legacy key, unless it
                // changed there meanwhile (a process of the older version kept a view).
                let forgotten = moving.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value.text] }
                _ = try await redis.run(Self.forgetIfUnchanged, keys: [other], arguments: forgotten).checked()
            case .legacy where !changes.isEmpty:
                // Copied, never moved: of two keepers of both versions at once, each could
                // otherwise forget the copy the other relied on. Kept without the fence (a
                // cluster), a copy made after a claim must be told as the job's own are.
                return true
            default: break
            }
            return keptAny
        }
        throw EntitlementStoreError(
            .contended, "Apple's word kept for \(originalTransactionId) kept changing under \(maximumAttempts) attempts")
    }

    /// Runs `keepIfUnchanged` on `key`, with the lock's fence key where one script may name
    /// both: always under the tagged key (the fence's slot), and under the legacy key only
    /// where the claims ride in the customer's write (`claimsInWrite`, one server).
    private func keepIfUnchanged(
        _ changes: [String], key: String, publisher: String, lock: TransactionLock.Token?
    ) async throws -> RedisReply {
        guard let lock else { return try await redis.run(Self.keepIfUnchanged, keys: [key], arguments: ["0"] + changes).checked() }
        let fence = keys.fence(publisher, lock.originalTransactionId)
        let arguments = [String(lock.value)] + changes
        switch unheldKey {
        case .tagged:
            return try await redis.run(Self.keepIfUnchanged, keys: [key, fence], arguments: arguments).checked()
        case .legacy:
            if claimsInWrite {
                do {
                    return try await redis.run(Self.keepIfUnchanged, keys: [key], otherSlotKeys: [fence], arguments: arguments).checked()
                } catch let error as RedisError where error.code == .serverError && error.message.hasPrefix("CROSSSLOT") {
                    // An endpoint that shards unannounced: as `update` finds it, kept without the fence from now on.
                    noteClaimsRefused()
                }
            }
            return try await redis.run(Self.keepIfUnchanged, keys: [key], arguments: ["0"] + changes).checked()
        }
    }

    /// Deletes each field `ARGV[2i-1]` of the hash that still holds `ARGV[2i]`; returns 1.
    package static let forgetIfUnchanged = RedisScript(
        name: "entitlements-forget-if-unchanged",
        source: """
            for i = 1, #ARGV, 2 do
              if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
            end
            return 1
            """)

    /// The entries of an `HGETALL` reply of what is kept: transaction id to the view's text and
    /// the view.
    static func keptViews(in reply: RedisReply) throws -> [String: (text: String, fact: PurchaseFact)] {
        let pairs = (try reply.checked().array ?? []).compactMap(\.string)
        var views: [String: (text: String, fact: PurchaseFact)] = [:]
        for index in stride(from: 0, to: pairs.count - 1, by: 2) {
            views[pairs[index]] = (pairs[index + 1], try keptView(pairs[index + 1]))
        }
        return views
    }

    /// One kept view, decoded; one that does not decode fails what reads it (fail closed).
    static func keptView(_ text: String) throws -> PurchaseFact {
        do {
            return try JSONDecoder().decode(PurchaseFact.self, from: Data(text.utf8))
        } catch {
            throw EntitlementStoreError(.unreadable, "Apple's word kept for a purchase nobody held cannot be read: \(error)")
        }
    }

    /// Sets each field `ARGV[3i+2]` of the hash to `ARGV[3i+4]` if every one still holds
    /// `ARGV[3i+3]` ("" for none), and, given the lock's fence key (`KEYS[2]`), if it holds no
    /// token later than `ARGV[1]`; returns 1, 0 (nothing set) when a field changed, or -3
    /// (nothing set) when a later job took the lock.
    package static let keepIfUnchanged = RedisScript(
        name: "entitlements-keep-if-unchanged",
        source: """
            if KEYS[2] then
              local last = redis.call('GET', KEYS[2])
              if last and tonumber(last) > tonumber(ARGV[1]) then return -3 end
            end
            for i = 2, #ARGV, 3 do
              if (redis.call('HGET', KEYS[1], ARGV[i]) or '') ~= ARGV[i + 1] then return 0 end
            end
            for i = 2, #ARGV, 3 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2]) end
            return 1
            """)

    /// After keeping (`keepUnheld`) under `lock`: whether a customer holds the purchase now,
    /// and whether a later job took its lock (a larger token on its fence key), in one round
    /// trip. Read after the keeping, they leave no claim unseen that missed what was kept: a
    /// claim made before shows as a holder; a job that took the lock after this read reads
    /// what was kept before it claims.
    package func afterKeeping(publisher: String, lock: TransactionLock.Token) async throws -> (held: Bool, lockPassedOn: Bool) {
        let id = lock.originalTransactionId
        // One key a command: Redis Cluster.
        let replies = try await redis.pipeline([["GET", ownerKey(publisher, id)], ["GET", keys.fence(publisher, id)]])
        let (owner, fence) = (try replies[0].checked(), try replies[1].checked())
        return (owner.string != nil, lock.passedOn(fence))
    }

    /// Forgets what was kept for these purchases: a customer holds them now.
    package func forgetUnheld(publisher: String, originalTransactionIds: some Collection<String>) async throws {
        let sorted = originalTransactionIds.sorted()
        guard !sorted.isEmpty else { return }
        // One key a command: Redis Cluster.
        let deletes = sorted.flatMap { [["DEL", unheldFactsKey(publisher, $0)], ["DEL", keys.legacyUnheldFacts(publisher, $0)]] }
        for reply in try await redis.pipeline(deletes) { _ = try reply.checked() }
    }

    /// The facts in `HVALS` replies, one view a transaction: of two (one under each key, as a
    /// rolling upgrade or a keeper that stopped before it forgot what it moved leaves them),
    /// the one that outranks the other (`PurchaseFact.outranks`).
    static func unheldFacts(in replies: some Collection<RedisReply>) throws -> [PurchaseFact] {
        var facts: [PurchaseFact] = []
        var index: [String: Int] = [:]
        for text in try replies.flatMap({ try ($0.checked().array ?? []).compactMap(\.string) }) {
            let fact = try keptView(text)
            if let at = index[fact.transactionId] {
                if fact.outranks(facts[at]) { facts[at] = fact }
            } else {
                index[fact.transactionId] = facts.count
                facts.append(fact)
            }
        }
        return facts
    }
}
