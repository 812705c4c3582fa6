import AppStore
import DurationUnits
import Entitlements
import Foundation
import Logging
import RedisClient
import Reporting
import Synchronization

/// Customers' entitlements in Redis: one document per customer, written with a version
/// check (optimistic concurrency), each change published on the publisher's channel; and
/// an owner index saying which customer holds each original transaction.
///
/// Its keys are `EntitlementKeys`. Each operation touches one key (a pipeline several, each
/// command one), so the store works on Redis Cluster unchanged; the one exception, a claim
/// in the customer's write, is made only off a cluster (`claimsInWrite`).
package struct EntitlementStore: Sendable {
    package let redis: RedisConnectionPool
    package let prefix: String
    private let logger: Logger

    /// How often `update` retries when another writer got there first.
    package var maximumAttempts = 8

    package let keys: EntitlementKeys

    /// How documents are written (both forms are read).
    package var format: StoredCustomer.Format
    /// How the event log's events are written (both forms are read).
    package var eventFormat: EventLog.Format
    /// Where Apple's word on purchases nobody holds is kept (both keys are read).
    package var unheldKey: UnheldKey = .tagged

    /// Where `keepUnheld` writes.
    package enum UnheldKey: String, Sendable {
        /// `EntitlementKeys.unheldFacts`, in the fence's slot: the keeping checks the fence on every topology.
        case tagged
        /// `EntitlementKeys.legacyUnheldFacts`, which versions before 2026-11-28 read
        /// (`ENTITLE_UNHELD_KEY=legacy`, while they still run).
        case legacy
    }
    /// Set once the server refused a claim in the customer's write (`claimsInWrite`).
    private let claimsRefused = ClaimsRefused()

    /// Whether a server refused keys across slots in one script; shared by the store's copies.
    private final class ClaimsRefused: Sendable {
        let value = Atomic<Bool>(false)
    }

    package init(
        redis: RedisConnectionPool, prefix: String = "entitle", format: StoredCustomer.Format = .deflated,
        eventFormat: EventLog.Format = .deflated, logger: Logger
    ) {
        self.redis = redis
        self.prefix = prefix
        self.keys = EntitlementKeys(prefix: prefix)
        self.format = format
        self.eventFormat = eventFormat
        self.logger = logger
    }

    /// The event log the store appends to.
    package var log: EventLog { EventLog(redis: redis, keys: keys) }
    /// Customers' APNs devices.
    package var devices: DeviceRegistry { DeviceRegistry(redis: redis, keys: keys) }
    /// Pushes, their audiences and results.
    package var pushes: PushStore { PushStore(redis: redis, keys: keys) }
    /// The reports folded from the log.
    package var reports: ReportStore { ReportStore(redis: redis, prefix: prefix) }

    func customerKey(_ publisher: String, _ customer: String) -> String { keys.customer(publisher, customer) }
    func ownerKey(_ publisher: String, _ originalTransactionId: String) -> String { keys.owner(publisher, originalTransactionId) }
    package func channel(_ publisher: String) -> String { keys.channel(publisher) }

    /// Writes the document when the stored version is still `ARGV[1]` ("" for none) and no
    /// newer lock holder wrote it (the fence of transaction `ARGV[5]`, escaped as
    /// `StoredCustomer.Record.fenceName` does, holds at most token `ARGV[6]`), with its outbox
    /// (`ARGV[7]`), appends the change's entries to the event log (`KEYS[2]`, the customer's
    /// partition: `ARGV[9]` entries of a field and its JSON from `ARGV[11]`, trimming entries
    /// older than `ARGV[8]` ms) and the lifecycle events' ids to the customer's list of them
    /// (trimmed alike), then publishes the change. Returns the new version, 0 when someone
    /// else wrote first, -1 when the writer's lock was taken over (fenced out), -2 when
    /// another customer holds a purchase the write claims, or -3 when a later job took the
    /// lock of a purchase the write claims.
    ///
    /// `KEYS[3]` on are the holder indexes (their scores after the customer in ARGV), then
    /// the owner keys the write claims for the customer, as many as the last ARGV says:
    /// written with the document or not at all; then as many fence keys of the same
    /// purchases (`TransactionLock`), each holding at most the token given for it; then the
    /// transaction locks the write releases, as many as the ARGV before the last says, each
    /// deleted after the write while it holds the value given for it. The claims' tokens and
    /// then the locks' values are the ARGVs before the two counts. With locks, the reply is
    /// the new version and how many were deleted. Owner, fence and lock keys are in other
    /// hash slots, so only a single server (or Sentinel's primary) is sent any
    /// (`claimsInWrite`).
    ///
    /// `ARGV[10]` is the layout written (`StoredCustomer.Layout`): `packed`, the field `doc`
    /// holding the version, the event ids, the fences and the document (`StoredCustomer.Record`,
    /// which starts with a digit); or `fields`, as versions before it wrote: `doc` the document
    /// alone, `v`, `ev` and `fence:T` (T as it is). Either is read, and a write in one layout
    /// leaves none of the other's fields. A version that knows only the fields cannot read a
    /// packed `doc`, so it fails loudly instead of taking the customer for a new one.
    static let compareAndSet = RedisScript(
        name: "entitlements-compare-and-set",
        source: """
            local key = KEYS[1]
            local function escape(name)
              if name == '' then return '%' end
              return (string.gsub(name, '[^%w%._%-]', function(c) return string.format('%%%02X', string.byte(c)) end))
            end
            local function unescape(name)
              if name == '%' then return '' end
              return (string.gsub(name, '%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
            end
            local stored = redis.call('HGET', key, 'doc')
            local record = stored and string.match(stored, '^%d') and stored or nil
            local current, listed
            -- The fences: transaction (escaped) -> token, and the order they were first written in.
            local fences, order = {}, {}
            if record then
              local fenceText
              current, listed, fenceText = string.match(record, '^(%d+)\\n([^\\n]*)\\n([^\\n]*)\\n')
              if not current then return redis.error_reply('ERR the customer record ' .. key .. ' is malformed') end
              for name, token in string.gmatch(fenceText, '(%S+)=(%d+)') do
                fences[name] = token
                table.insert(order, name)
              end
            else
              current = redis.call('HGET', key, 'v') or ''
              listed = redis.call('HGET', key, 'ev') or ''
              if ARGV[10] == 'packed' and current ~= '' then
                -- Moving to the packed record: every fence field goes with it.
                local all = redis.call('HGETALL', key)
                for i = 1, #all, 2 do
                  if string.sub(all[i], 1, 6) == 'fence:' then
                    local name = escape(string.sub(all[i], 7))
                    if not fences[name] then table.insert(order, name) end
                    fences[name] = all[i + 1]
                  end
                end
              elseif ARGV[5] ~= '' then
                fences[ARGV[5]] = redis.call('HGET', key, 'fence:' .. unescape(ARGV[5]))
              end
            end
            if current ~= ARGV[1] then return 0 end
            if ARGV[5] ~= '' then
              if tonumber(fences[ARGV[5]] or '0') > tonumber(ARGV[6]) then return -1 end
              if not fences[ARGV[5]] then table.insert(order, ARGV[5]) end
              fences[ARGV[5]] = ARGV[6]
            end
            local count = tonumber(ARGV[9])
            local customer = ARGV[11 + 2 * count]
            -- KEYS end with the owner keys claimed in this write (ARGV[#ARGV] of them), their
            -- purchases' fence keys (the last lock token handed out; this job's tokens are in
            -- ARGV before the locks' values), then the locks it releases (ARGV[#ARGV - 1];
            -- their holders' values just before): one server only. Claims are all or none:
            -- none when another customer holds one, or when a later job took one's lock (this
            -- job's lease ran out, and the later job may have kept Apple's word for the claim).
            local locks = tonumber(ARGV[#ARGV - 1])
            local claims = tonumber(ARGV[#ARGV])
            local lastFence = #KEYS - locks
            local lastOwner = lastFence - claims
            local lastHolder = lastOwner - claims
            for k = 1, claims do
              local last = redis.call('GET', KEYS[lastOwner + k])
              if last and tonumber(last) > tonumber(ARGV[#ARGV - 2 - locks - claims + k]) then return -3 end
            end
            for k = lastHolder + 1, lastOwner do
              local holder = redis.call('GET', KEYS[k])
              if holder and holder ~= customer then return -2 end
            end
            for k = lastHolder + 1, lastOwner do redis.call('SET', KEYS[k], customer, 'NX') end
            local version = (tonumber(current) or 0) + 1
            local ids = {}
            if count > 0 then
              local time = redis.call('TIME')
              local oldest = string.format('%.0f', tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) - tonumber(ARGV[8]))
              for i = 0, count - 1 do
                local field = ARGV[11 + 2 * i]
                local id = redis.call('XADD', KEYS[2], 'MINID', '~', oldest, '*', field, ARGV[12 + 2 * i])
                if field == 'Z' or field == 'E' or field == 'e' then table.insert(ids, id) end
              end
              if #ids > 0 then
                local kept = {}
                for id in string.gmatch(listed, '%S+') do
                  local ms = tonumber(string.match(id, '^(%d+)'))
                  if ms and ms >= tonumber(oldest) then table.insert(kept, id) end
                end
                for _, id in ipairs(ids) do table.insert(kept, id) end
                listed = table.concat(kept, ' ')
              end
            end
            if ARGV[10] == 'packed' then
              local written = {}
              for _, name in ipairs(order) do table.insert(written, name .. '=' .. fences[name]) end
              redis.call('HSET', key, 'doc', version .. '\\n' .. listed .. '\\n' .. table.concat(written, ' ') .. '\\n' .. ARGV[2])
              if not record and current ~= '' then
                -- The older fields, a thousand at a time (Lua's unpack takes about 8,000 at most).
                local gone = {'v', 'ev'}
                for _, name in ipairs(order) do
                  table.insert(gone, 'fence:' .. unescape(name))
                  if #gone == 1000 then
                    redis.call('HDEL', key, unpack(gone))
                    gone = {}
                  end
                end
                if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
              end
            else
              redis.call('HSET', key, 'doc', ARGV[2], 'v', version)
              if listed ~= '' then redis.call('HSET', key, 'ev', listed) end
              if record then
                for _, name in ipairs(order) do redis.call('HSET', key, 'fence:' .. unescape(name), fences[name]) end
              elseif ARGV[5] ~= '' then
                redis.call('HSET', key, 'fence:' .. unescape(ARGV[5]), ARGV[6])
              end
            end
            if ARGV[7] ~= '' then redis.call('HSET', key, 'outbox', ARGV[7]) end
            -- The holder indexes (KEYS[3] on): the customer (after the entries) and a score
            -- per index key, '' to leave the index.
            local at = 11 + 2 * count
            for k = 3, lastHolder do
              local score = ARGV[at + k - 2]
              if score == '' then redis.call('ZREM', KEYS[k], customer) else redis.call('ZADD', KEYS[k], score, customer) end
            end
            redis.call('PUBLISH', ARGV[3], ARGV[4] .. version .. '}')
            if locks == 0 then return version end
            local released = 0
            for i = 1, locks do
              if redis.call('GET', KEYS[lastFence + i]) == ARGV[#ARGV - 2 - locks + i] then
                released = released + redis.call('DEL', KEYS[lastFence + i])
              end
            end
            return {version, released}
            """)

    /// The customer's document and its version (0 when the customer is new).
    package func load(publisher: String, customer: String) async throws -> (state: CustomerEntitlements, version: Int) {
        let loaded = try await loadWithOutbox(publisher: publisher, customer: customer)
        return (loaded.state, loaded.version)
    }

    /// Several customers' documents in one pipelined round trip; customers without one are absent.
    package func load(publisher: String, customers: [String]) async throws -> [String: CustomerEntitlements] {
        guard !customers.isEmpty else { return [:] }
        let replies = try await redis.pipeline(customers.map { ["HGET", customerKey(publisher, $0), "doc"] })
        var states: [String: CustomerEntitlements] = [:]
        for (customer, reply) in zip(customers, replies) {
            do {
                guard let record = try StoredCustomer.Record(stored: reply.string) else { continue }
                states[customer] = try StoredCustomer.decode(record.document, publisher: publisher, customer: customer)
            } catch {
                throw EntitlementStoreError(
                    .unreadable, "the entitlements of customer \(customer) of \(publisher) cannot be read: \(error)")
            }
        }
        return states
    }

    /// A customer's document as read once: the version a compare-and-set must find, and the
    /// follow-up jobs still in its outbox.
    package struct Snapshot: Sendable {
        package var state: CustomerEntitlements
        package var version: Int
        package var outbox: [FollowUpJob]
    }

    func loadWithOutbox(publisher: String, customer: String) async throws -> Snapshot {
        try snapshot(
            try await redis.send(snapshotCommand(publisher: publisher, customer: customer)), publisher: publisher, customer: customer)
    }

    /// The read `snapshot(_:)` decodes, for a caller that pipelines it with others.
    package func snapshotCommand(publisher: String, customer: String) -> [String] {
        ["HMGET", customerKey(publisher, customer), "doc", "v", "outbox"]
    }

    /// The customer as `snapshotCommand`'s reply shows it.
    package func snapshot(_ reply: RedisReply, publisher: String, customer: String) throws -> Snapshot {
        guard let values = reply.array, values.count == 3 else {
            return Snapshot(state: CustomerEntitlements(publisher: publisher, customer: customer), version: 0, outbox: [])
        }
        do {
            guard let record = try StoredCustomer.Record(stored: values[0].string, version: values[1].string)
            else { return Snapshot(state: CustomerEntitlements(publisher: publisher, customer: customer), version: 0, outbox: []) }
            let state = try StoredCustomer.decode(record.document, publisher: publisher, customer: customer)
            let outbox = try values[2].string.map { try JSONDecoder().decode([FollowUpJob].self, from: Data($0.utf8)) } ?? []
            return Snapshot(state: state, version: record.version, outbox: outbox)
        } catch {
            throw EntitlementStoreError(.unreadable, "the entitlements of customer \(customer) of \(publisher) cannot be read: \(error)")
        }
    }

    /// Who holds each purchase (absent: nobody), the customer as it stands, and the replies
    /// to `extra` commands, in one pipelined round trip: what a claim reads before it decides.
    package func readForClaim(
        publisher: String, originalTransactionIds: some Collection<String>, customer: String, extra: [[String]] = []
    ) async throws -> ClaimRead {
        try await readForClaim(
            ClaimReadRequest(publisher: publisher, originalTransactionIds: originalTransactionIds, customer: customer, extra: extra))
    }

    /// `readForClaim` of a request.
    package func readForClaim(_ request: ClaimReadRequest) async throws -> ClaimRead {
        try claimRead(from: try await redis.pipeline(claimReads(request)), request)
    }

    /// What a claim reads (`readForClaim`), asked before it is sent: with the locks' acquisition
    /// where the server runs them in order (`TransactionLock.acquire(_:publisher:job:then:)`).
    package struct ClaimReadRequest: Sendable {
        package var publisher: String
        /// Sorted.
        package var originalTransactionIds: [String]
        package var customer: String
        /// The caller's own commands (its job's memo), whose replies come back in `ClaimRead.extra`.
        package var extra: [[String]]

        package init(publisher: String, originalTransactionIds: some Collection<String>, customer: String, extra: [[String]] = []) {
            self.publisher = publisher
            self.originalTransactionIds = originalTransactionIds.sorted()
            self.customer = customer
            self.extra = extra
        }
    }

    /// What a claim reads: who holds each purchase, the customer, and the caller's own.
    package struct ClaimRead: Sendable {
        /// By original transaction id; absent: nobody.
        package var owners: [String: String]
        package var snapshot: Snapshot
        /// Apple's word kept for purchases nobody held when it came (`keepUnheld`): a refund a
        /// signed transaction from before it does not show.
        package var unheld: [PurchaseFact]
        /// The replies to the request's `extra` commands.
        package var extra: [RedisReply]
    }

    /// The commands of a claim's read, in the order `claimRead(from:_:)` reads their replies.
    package func claimReads(_ request: ClaimReadRequest) -> [[String]] {
        request.originalTransactionIds.map { ["GET", ownerKey(request.publisher, $0)] }
            + request.originalTransactionIds.flatMap { unheldFactsReads(request.publisher, $0) }
            + [snapshotCommand(publisher: request.publisher, customer: request.customer)] + request.extra
    }

    /// The results of `claimReads` sent with other calls; an error among them throws.
    package func claimRead(from results: [Result<RedisReply, RedisError>], _ request: ClaimReadRequest) throws -> ClaimRead {
        try claimRead(from: results.map { try $0.get() }, request)
    }

    /// The replies to `claimReads`, read; an error reply throws.
    func claimRead(from replies: [RedisReply], _ request: ClaimReadRequest) throws -> ClaimRead {
        let ids = request.originalTransactionIds
        guard replies.count > 3 * ids.count else { throw RedisError(.unexpectedReply, "a claim's reads came back short") }
        // An error reply is no owner, no empty customer and no missing memo.
        for reply in replies { _ = try reply.checked() }
        var owners: [String: String] = [:]
        for (index, id) in ids.enumerated() { owners[id] = replies[index].string }
        let unheld = try Self.unheldFacts(in: replies[ids.count..<(3 * ids.count)])
        let snapshot = try snapshot(replies[3 * ids.count], publisher: request.publisher, customer: request.customer)
        return ClaimRead(owners: owners, snapshot: snapshot, unheld: unheld, extra: Array(replies[(3 * ids.count + 1)...]))
    }

    /// What a change to a customer writes besides the document, in the same script: its
    /// lifecycle events and report delta (into the event log), and its follow-up jobs (into
    /// the outbox).
    package struct Change: Sendable {
        package var events: [LifecycleEvent]
        package var delta: ReportDelta?
        package var followUps: [FollowUpJob]
        /// How long the log keeps raw entries (the publisher's `eventRetentionDays`).
        package var retention: Duration

        package init(
            events: [LifecycleEvent] = [], delta: ReportDelta? = nil, followUps: [FollowUpJob] = [],
            retention: Duration = .seconds(400 * 86_400)
        ) {
            self.events = events
            self.delta = delta
            self.followUps = followUps
            self.retention = retention
        }
    }

    /// Reads the customer, lets `change` modify the document, and writes it back if nobody
    /// else wrote meanwhile (otherwise reads again and reapplies). Nothing is written when
    /// `change` leaves the document as it was. Returns what `change` returned.
    ///
    /// With a `fence`, the write is refused (`EntitlementStoreError.fenced`) once a later
    /// holder of that lock has written the customer: a job that lost its lock changes nothing.
    package func update<Result: Sendable>(
        publisher: String, customer: String, fence: TransactionLock.Token? = nil, _ change: (inout CustomerEntitlements) throws -> Result
    ) async throws -> Result {
        try await update(publisher: publisher, customer: customer, fence: fence, change, effects: { _, _, _ in Change() }).result
    }

    /// `update`, writing with the change what `effects` derives from the document before and
    /// after it and the version it makes: lifecycle events and a report delta appended to the
    /// event log, follow-up jobs (webhooks, renewal checks) into the customer's outbox, all in
    /// the same atomic write. Returns the outbox as it stands after the update (the caller
    /// enqueues and `clear`s it; a caller that died before that leaves it for the job's
    /// rerun) and the events appended.
    /// `snapshot`: the customer as the caller read it (`readForClaim`), taken for the first
    /// attempt instead of reading it again; the compare-and-set still refuses it if stale, and
    /// a change it shows as nothing to write is judged again on a fresh read.
    /// `claiming`: the locks of the purchases the customer claims (`claim(publisher:locked:for:)`):
    /// in the same write where `claimsInWrite` (a round trip fewer), else just before it; when
    /// another customer holds one, nothing is written and `EntitlementStoreError.claimTaken` is
    /// thrown (the caller decides again); when a later job took one's lock, `fenced`.
    /// `releasing`: the closing writes of a job that writes nothing more under its locks once
    /// this write is made. Where `claimsInWrite`, and when the write leaves no follow-up job
    /// to deliver (an empty outbox) and nothing to close, the locks are released in the write
    /// (a round trip fewer) and `releasing` says so (`ClosingWrites.released`).
    package func update<Result: Sendable>(
        publisher: String, customer: String, fence: TransactionLock.Token?, snapshot: Snapshot? = nil,
        claiming: [TransactionLock.Token] = [], releasing: ClosingWrites? = nil,
        _ change: (inout CustomerEntitlements) throws -> Result,
        effects: (_ before: CustomerEntitlements, _ after: CustomerEntitlements, _ version: Int) throws -> Change
    ) async throws -> (result: Result, outbox: [FollowUpJob], events: [LifecycleEvent]) {
        var prefetched = snapshot
        var claiming = claiming
        for attempt in 1...maximumAttempts {
            let read: Snapshot
            let wasPrefetched = prefetched != nil
            if let taken = prefetched {
                read = taken
                prefetched = nil
            } else {
                read = try await loadWithOutbox(publisher: publisher, customer: customer)
            }
            let (stored, version, outbox) = (read.state, read.version, read.outbox)
            var state = stored
            let result = try change(&state)
            if state == stored {
                // A write's compare-and-set refuses a stale snapshot; "nothing to write" has no
                // such check, so it is decided only on the customer as read here and now.
                if wasPrefetched { continue }
                try await claimApart(claiming, publisher: publisher, customer: customer)
                return (result, outbox, [])
            }
            // Claimed apart, before the write, where the write cannot carry the claims.
            if !claiming.isEmpty, !claimsInWrite {
                try await claimApart(claiming, publisher: publisher, customer: customer)
                claiming = []
            }
            let effect = try effects(stored, state, version + 1)
            let added = effect.followUps.filter { job in !outbox.contains { $0.id == job.id } }
            let document = try StoredCustomer.encode(state, format: format)
            let newOutbox = added.isEmpty ? "" : String(decoding: try Self.encoder.encode(outbox + added), as: UTF8.self)
            let event = try Self.eventPrefix(publisher: publisher, customer: customer)
            var entries: [String] = []
            for item in effect.events {
                let entry = try EventLog.entry(item, format: eventFormat)
                entries += [entry.field, entry.value]
            }
            if let delta = effect.delta {
                let entry = try EventLog.entry(delta, customer: customer, format: eventFormat)
                entries += [entry.field, entry.value]
            }
            let holders = holderChanges(publisher: publisher, customer: customer, before: stored, after: state)
            // The locks go with the write only where nothing follows it under them.
            let release = claimsInWrite && outbox.isEmpty && added.isEmpty ? releasing?.releasableLocks() : nil
            let written: RedisReply
            do {
                written = try await redis.run(
                    Self.compareAndSet,
                    keys: [customerKey(publisher, customer), keys.events(publisher, customer: customer)] + holders.map(\.key),
                    otherSlotKeys: claiming.map { ownerKey(publisher, $0.originalTransactionId) }
                        + claiming.map { keys.fence(publisher, $0.originalTransactionId) } + (release?.keys ?? []),
                    arguments: [
                        version == 0 ? "" : String(version), document, channel(publisher), event,
                        fence.map { StoredCustomer.Record.fenceName($0.originalTransactionId) } ?? "", fence.map { String($0.value) } ?? "",
                        newOutbox, String(effect.retention.components.seconds * 1000), String(entries.count / 2), format.layout.rawValue,
                    ] + entries + [customer] + holders.map(\.score) + claiming.map { String($0.value) } + (release?.values ?? [])
                        + [String(release?.keys.count ?? 0), String(claiming.count)])
            } catch let error as RedisError
                where !(claiming.isEmpty && release == nil) && error.code == .serverError && error.message.hasPrefix("CROSSSLOT")
            {
                // A `redis://` endpoint that shards (or a proxy checking slots): claims and
                // releases go apart from now on, and this attempt is made again that way.
                noteClaimsRefused()
                continue
            }
            if let reply = written.array, reply.count == 2, let newVersion = reply[0].int, newVersion > 0 {
                // Marked released only when every lock went: one that passed to another job
                // meanwhile is not, and the job's own release then finds it gone.
                if let release, reply[1].int == release.keys.count { releasing?.markReleased() }
                return (result, outbox + added, effect.events)
            }
            if let newVersion = written.int, newVersion > 0 { return (result, outbox + added, effect.events) }
            if written.int == -1, let fence {
                throw EntitlementStoreError(
                    .fenced, "the lock on \(fence.originalTransactionId) passed to a later job before this one wrote")
            }
            if written.int == -2 { throw Self.claimTaken(publisher, customer) }
            if written.int == -3 { throw Self.claimFenced(claiming) }
            logger.debug("entitlement write raced; retrying", metadata: ["attempt": "\(attempt)"])
        }
        throw EntitlementStoreError(.contended, "customer \(customer) of \(publisher) kept changing under \(maximumAttempts) attempts")
    }

    /// Adds the customer to the holder indexes its stored document puts it in, where it is
    /// not there yet (`ZADD NX`: a score a live write set stands); for customers written
    /// before the indexes existed (`entitle migrate holders`). Returns how many it added.
    package func indexHolders(publisher: String, customer: String) async throws -> Int {
        let state = try await load(publisher: publisher, customer: customer).state
        let entries = holderChanges(
            publisher: publisher, customer: customer, before: CustomerEntitlements(publisher: publisher, customer: customer), after: state)
        guard !entries.isEmpty else { return 0 }
        let replies = try await redis.pipeline(entries.map { ["ZADD", $0.key, "NX", $0.score, customer] })
        return replies.compactMap(\.int).reduce(0, +)
    }

    /// The holder index entries a change moves: for every entitlement and offer whose end
    /// differs, its key in the customer's partition and the new score (ms, `+inf`), or ""
    /// when the customer no longer has it at all.
    func holderChanges(
        publisher: String, customer: String, before: CustomerEntitlements, after: CustomerEntitlements
    ) -> [(key: String, score: String)] {
        let (old, new) = (AccessEnds(before), AccessEnds(after))
        let partition = EntitlementKeys.partition(of: customer)
        func changes(_ old: [String: Date?], _ new: [String: Date?], key: (String) -> String) -> [(key: String, score: String)] {
            Set(old.keys).union(new.keys).sorted().compactMap { name in
                guard old[name] != new[name] else { return nil }
                guard let end = new[name] else { return (key(name), "") }
                return (key(name), end.map { String(AppleTimestamp($0).milliseconds) } ?? "+inf")
            }
        }
        return changes(old.entitlements, new.entitlements) { keys.holders(publisher, entitlement: $0, partition: partition) }
            + changes(old.offers, new.offers) { keys.offerHolders(publisher, offerId: $0, partition: partition) }
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }()

    /// Removes follow-up jobs, once enqueued, from the customer's outbox.
    static let clearOutbox = RedisScript(
        name: "entitlements-clear-outbox",
        source: """
            local raw = redis.call('HGET', KEYS[1], 'outbox')
            if not raw then return 0 end
            local done = {}
            for i = 1, #ARGV do done[ARGV[i]] = true end
            local keep = {}
            for _, item in ipairs(cjson.decode(raw)) do
              if not done[item.id] then table.insert(keep, item) end
            end
            if #keep == 0 then redis.call('HDEL', KEYS[1], 'outbox') else redis.call('HSET', KEYS[1], 'outbox', cjson.encode(keep)) end
            return #keep
            """)

    package func clear(outbox ids: [String], publisher: String, customer: String) async throws {
        guard !ids.isEmpty else { return }
        _ = try await redis.run(Self.clearOutbox, keys: [customerKey(publisher, customer)], arguments: ids)
    }

    /// What `scheduleRenewalChecks` and `clear(outbox:)` write, kept in `closing` to go with
    /// the locks' release.
    package func closeDelivery(
        renewalChecks checks: [DueRenewal], outbox ids: [String],
        publisher: String, customer: String, into closing: ClosingWrites
    ) {
        closing.add(
            renewalCheckCalls(checks)
                + (ids.isEmpty ? [] : [.script(Self.clearOutbox, keys: [customerKey(publisher, customer)], arguments: ids)]))
    }

    /// The start of the change event; the script appends the version and the closing brace.
    static func eventPrefix(publisher: String, customer: String) throws -> String {
        // Written by hand, as the event log's entries are (`JSONSerialization` cost a receipt job 2 %).
        var json = EventLogJSON()
        json.add("customer", customer)
        json.add("publisher", publisher)
        json.key("version")
        return json.text
    }

    // MARK: Holders

    /// The customers whose access to `entitlement` (or to `offerId`) ends after `ms` (or
    /// never), from every partition's holder index: one round trip of 16 reads. Sorted.
    package func holders(publisher: String, entitlement: String? = nil, offerId: String? = nil, after ms: Int64) async throws -> [String] {
        let keys = holderKeys(publisher: publisher, entitlement: entitlement, offerId: offerId)
        let replies = try await redis.pipeline(keys.map { ["ZRANGEBYSCORE", $0, "(" + String(ms), "+inf"] })
        return replies.flatMap { $0.array?.compactMap(\.string) ?? [] }.sorted()
    }

    /// Drops the members whose access ended by `ms`: they are in no audience from then on,
    /// and a later purchase's write puts them back (its end differs from the one they had).
    package func pruneHolders(publisher: String, entitlement: String? = nil, offerId: String? = nil, endedBy ms: Int64) async throws {
        let keys = holderKeys(publisher: publisher, entitlement: entitlement, offerId: offerId)
        _ = try await redis.pipeline(keys.map { ["ZREMRANGEBYSCORE", $0, "-inf", String(ms)] })
    }

    func holderKeys(publisher: String, entitlement: String?, offerId: String?) -> [String] {
        (0..<EntitlementKeys.partitions).map { partition in
            if let offerId { return keys.offerHolders(publisher, offerId: offerId, partition: partition) }
            return keys.holders(publisher, entitlement: entitlement ?? "", partition: partition)
        }
    }

    // MARK: Owners

    /// Whether `update` may claim purchases in the customer's write (`claiming`): the owner
    /// keys share no hash slot with the customer, so not on a Redis Cluster.
    /// Nor behind a sharded address (`?sharded=yes`), nor once the server refused one (an
    /// endpoint that shards unannounced).
    package var claimsInWrite: Bool {
        redis.configuration.holdsEveryKeyOnOneServer && !claimsRefused.value.load(ordering: .relaxed)
    }

    /// Whether a job's reads may follow its locks in their round trip
    /// (`TransactionLock.acquire(_:publisher:job:then:)`): one server, which runs them in the
    /// order sent, so they read what the locks' previous holder wrote before letting go. An
    /// endpoint that shards unannounced (no `?sharded=yes`) is taken for one server until it
    /// refuses a script's keys, as for `claimsInWrite`.
    package var readsWithLocks: Bool {
        redis.configuration.runsPipelinesInOrder && claimsInWrite
    }

    /// Claims these purchases for `customer` in their own round trip (`claim(publisher:locked:for:)`);
    /// throws `claimTaken` when another customer holds one.
    func claimApart(_ claiming: [TransactionLock.Token], publisher: String, customer: String) async throws {
        guard !claiming.isEmpty else { return }
        let owners = try await claim(publisher: publisher, locked: claiming, for: customer)
        if owners.values.contains(where: { $0 != customer }) { throw Self.claimTaken(publisher, customer) }
    }

    static func claimTaken(_ publisher: String, _ customer: String) -> EntitlementStoreError {
        EntitlementStoreError(.claimTaken, "another customer of \(publisher) claimed a purchase customer \(customer) was claiming")
    }

    static func claimFenced(_ claiming: [TransactionLock.Token]) -> EntitlementStoreError {
        EntitlementStoreError(
            .fenced,
            "the lock on \(claiming.map(\.originalTransactionId).sorted().joined(separator: ", ")) passed to a later job before this one claimed it"
        )
    }

    /// Sets `customer` as the holder of each purchase nobody holds (`KEYS[1...n]`, the owner
    /// keys) unless a later job took one's lock (`KEYS[n+1...2n]`, the fence keys, each
    /// holding at most the token `ARGV[1 + i]`): then nothing is set and -3 is returned.
    /// Else the holder of each, in order.
    static let claimUnderLocks = RedisScript(
        name: "entitlements-claim-under-locks",
        source: """
            local n = #KEYS / 2
            for i = 1, n do
              local last = redis.call('GET', KEYS[n + i])
              if last and tonumber(last) > tonumber(ARGV[1 + i]) then return -3 end
            end
            local holders = {}
            for i = 1, n do
              redis.call('SET', KEYS[i], ARGV[1], 'NX')
              holders[i] = redis.call('GET', KEYS[i])
            end
            return holders
            """)

    /// `claim` for purchases under this job's locks: on a single server (`claimsInWrite`) the
    /// claims are refused (`EntitlementStoreError.fenced`) when a later job took any of the
    /// locks (the job's lease ran out meanwhile; the later job may have kept Apple's word for
    /// whoever claims, `keepUnheld`). Elsewhere the owner and fence keys share no slot: the
    /// claims are made as `claim` makes them, and `fenced` is thrown after them when a later
    /// job took a lock (`claimThenCheck`).
    package func claim(
        publisher: String, locked tokens: [TransactionLock.Token], for customer: String
    ) async throws -> [String: String] {
        let sorted = tokens.sorted { $0.originalTransactionId < $1.originalTransactionId }
        guard !sorted.isEmpty else { return [:] }
        guard claimsInWrite else { return try await claimThenCheck(publisher: publisher, locked: sorted, for: customer) }
        let reply: RedisReply
        do {
            let owners = sorted.map { ownerKey(publisher, $0.originalTransactionId) }
            reply = try await redis.run(
                Self.claimUnderLocks, keys: [owners[0]],
                otherSlotKeys: owners.dropFirst() + sorted.map { keys.fence(publisher, $0.originalTransactionId) },
                arguments: [customer] + sorted.map { String($0.value) })
        } catch let error as RedisError where error.code == .serverError && error.message.hasPrefix("CROSSSLOT") {
            // An endpoint that shards unannounced: as `update` finds it, claims go apart from now on.
            noteClaimsRefused()
            return try await claimThenCheck(publisher: publisher, locked: sorted, for: customer)
        }
        if reply.int == -3 { throw Self.claimFenced(sorted) }
        guard let holders = reply.array, holders.count == sorted.count else {
            throw EntitlementStoreError(.unreadable, "the claim's reply is not one holder a purchase: \(reply)")
        }
        var owners: [String: String] = [:]
        for (token, holder) in zip(sorted, holders) { owners[token.originalTransactionId] = holder.string ?? customer }
        return owners
    }

    /// Records `customer` as the holder of `originalTransactionId` unless someone holds it;
    /// returns the holder (`customer` when the claim succeeded or it already held it).
    package func claim(publisher: String, originalTransactionId: String, for customer: String) async throws -> String {
        try await claim(publisher: publisher, originalTransactionIds: [originalTransactionId], for: customer)[originalTransactionId]
            ?? customer
    }

    /// `claim` for several purchases in one round trip; the holder of each.
    package func claim(
        publisher: String, originalTransactionIds: some Collection<String>, for customer: String
    ) async throws -> [String: String] {
        let sorted = originalTransactionIds.sorted()
        let commands = sorted.flatMap { id in [["SET", ownerKey(publisher, id), customer, "NX"], ["GET", ownerKey(publisher, id)]] }
        guard !commands.isEmpty else { return [:] }
        let replies = try await redis.pipeline(commands)
        var owners: [String: String] = [:]
        for (index, id) in sorted.enumerated() { owners[id] = replies[index * 2 + 1].string ?? customer }
        return owners
    }

    /// Claims as `claim` does, then reads the purchases' fence keys: a later token than the
    /// job's means its lease ran out, and the claim may have missed Apple's word kept by the
    /// job that took the lock (`keepUnheld`): `fenced` is thrown, and the job's next run, as
    /// the holder, reads what was kept. Read after the claim's reply, not beside it: on a
    /// cluster the two go to different servers, in no set order. A later job that took the
    /// lock after this read finds the claim (`afterKeeping`).
    func claimThenCheck(
        publisher: String, locked sorted: [TransactionLock.Token], for customer: String
    ) async throws -> [String: String] {
        let owners = try await claim(publisher: publisher, originalTransactionIds: sorted.map(\.originalTransactionId), for: customer)
        // One key a command: Redis Cluster.
        let fences = try await redis.pipeline(sorted.map { ["GET", keys.fence(publisher, $0.originalTransactionId)] })
        for (token, reply) in zip(sorted, fences) where token.passedOn(try reply.checked()) { throw Self.claimFenced(sorted) }
        return owners
    }

    /// Claims go apart from the write from now on: the server refused a script's keys across
    /// hash slots (an endpoint that shards unannounced). Said once.
    func noteClaimsRefused() {
        if !claimsRefused.value.exchange(true, ordering: .relaxed) {
            logger.notice(
                "the Redis server refuses a script's keys across hash slots; purchases are claimed before the write, locks released after it"
            )
        }
    }

    /// Who holds each of these purchases, read without claiming any (a dry run); a purchase
    /// nobody holds is absent.
    package func owners(publisher: String, originalTransactionIds: some Collection<String>) async throws -> [String: String] {
        let sorted = originalTransactionIds.sorted()
        guard !sorted.isEmpty else { return [:] }
        let replies = try await redis.pipeline(sorted.map { ["GET", ownerKey(publisher, $0)] })
        var owners: [String: String] = [:]
        for (index, id) in sorted.enumerated() { owners[id] = replies[index].string }
        return owners
    }

    /// Moves `originalTransactionId` to `customer` (a transfer).
    package func setOwner(publisher: String, originalTransactionId: String, to customer: String) async throws {
        _ = try await redis.send(["SET", ownerKey(publisher, originalTransactionId), customer])
    }

    package func owner(publisher: String, originalTransactionId: String) async throws -> String? {
        try await redis.send(["GET", ownerKey(publisher, originalTransactionId)]).string
    }

    func sharersKey(_ publisher: String, _ originalTransactionId: String) -> String { keys.sharers(publisher, originalTransactionId) }

    /// Records `customer` as sharing `originalTransactionId` with its owner (the `share`
    /// policy), so what Apple later says about it reaches them too.
    package func addSharer(_ customer: String, publisher: String, originalTransactionId: String) async throws {
        _ = try await redis.send(["SADD", sharersKey(publisher, originalTransactionId), customer])
    }

    func formerHoldersKey(_ publisher: String, _ originalTransactionId: String) -> String {
        keys.formerHolders(publisher, originalTransactionId)
    }

    /// Records that `customer` held `originalTransactionId` before a transfer took it away,
    /// so refunds and their reversals Apple reports later keep their history true.
    package func addFormerHolder(_ customer: String, publisher: String, originalTransactionId: String) async throws {
        _ = try await redis.send(["SADD", formerHoldersKey(publisher, originalTransactionId), customer])
    }

    /// Those who held `originalTransactionId` before, whoever holds it now.
    package func formerHolders(publisher: String, originalTransactionId: String) async throws -> [String] {
        (try await redis.send(["SMEMBERS", formerHoldersKey(publisher, originalTransactionId)]).array ?? []).compactMap(\.string).sorted()
    }

    /// Everyone holding `originalTransactionId`: the owner first, then those sharing it.
    package func holders(publisher: String, originalTransactionId: String) async throws -> [String] {
        // Two keys, two calls: each call touches one key (Redis Cluster).
        guard let owner = try await owner(publisher: publisher, originalTransactionId: originalTransactionId) else { return [] }
        return Self.holders(owner: owner, sharers: try await redis.send(["SMEMBERS", sharersKey(publisher, originalTransactionId)]))
    }

    /// The owner first, then those sharing the purchase (an `SMEMBERS` reply), in order.
    static func holders(owner: String, sharers: RedisReply) -> [String] {
        [owner] + (sharers.array ?? []).compactMap(\.string).filter { $0 != owner }.sorted()
    }

    /// A migrated subscription (its transactions name a `previousOriginalTransactionId`)
    /// goes to whoever holds the chain it came from, with those sharing it, whatever the
    /// transfer policy: it is the same subscription under a new id, not another customer's
    /// purchase. A new id someone already holds keeps its holder.
    package func carryMigrations(of facts: [PurchaseFact], publisher: String) async throws {
        try await carryMigrations(Self.migrations(of: facts), publisher: publisher)
    }

    /// The migrated subscriptions among `facts`: new original transaction id -> previous.
    package static func migrations(of facts: [PurchaseFact]) -> [String: String] {
        var moves: [String: String] = [:]
        for fact in facts {
            if let previous = fact.previousOriginalTransactionId, previous != fact.originalTransactionId {
                moves[fact.originalTransactionId] = previous
            }
        }
        return moves
    }

    /// `carryMigrations(of:)` for the moves `migrations(of:)` found.
    package func carryMigrations(_ moves: [String: String], publisher: String) async throws {
        for (new, previous) in moves.sorted(by: { $0.key < $1.key }) {
            let from = try await holders(publisher: publisher, originalTransactionId: previous)
            guard let owner = from.first else { continue }
            guard try await claim(publisher: publisher, originalTransactionId: new, for: owner) == owner else { continue }
            for sharer in from.dropFirst() { try await addSharer(sharer, publisher: publisher, originalTransactionId: new) }
        }
    }

    // MARK: Receipts

    func receiptKey(_ publisher: String, _ originalTransactionId: String) -> String { keys.receipt(publisher, originalTransactionId) }

    /// Keeps the latest app receipt that proved `originalTransactionId`, for renewal checks
    /// by verifyReceipt when the app has no App Store Server API key.
    package func keepReceipt(_ receipt: String, publisher: String, originalTransactionIds: some Sequence<String>) async throws {
        let commands = originalTransactionIds.map { ["SET", receiptKey(publisher, $0), receipt] }
        if !commands.isEmpty { _ = try await redis.pipeline(commands) }
    }

    package func receipt(publisher: String, originalTransactionId: String) async throws -> String? {
        try await redis.send(["GET", receiptKey(publisher, originalTransactionId)]).string
    }

    // MARK: Notifications

    /// Which notifications were applied.
    package var appliedNotifications: AppliedNotifications { AppliedNotifications(redis: redis, keys: keys) }

    /// Whether a notification with this id (Apple's notificationUUID, or a digest of a V1
    /// body) was applied within the last 30 days at least.
    package func wasApplied(publisher: String, notification id: String) async throws -> Bool {
        try await appliedNotifications.contains(publisher: publisher, notification: id, nowMs: Self.nowMs())
    }

    /// Records a customer's answer to sharing consumption information with Apple (Apple asks
    /// for it when the customer requests a refund), in the customer's hash beside the document.
    package func setConsumptionConsent(_ consented: Bool, publisher: String, customer: String) async throws {
        _ = try await redis.send(["HSET", customerKey(publisher, customer), "consumptionConsent", consented ? "1" : "0"])
    }

    /// The customer's recorded answer, nil when none was recorded.
    package func consumptionConsent(publisher: String, customer: String) async throws -> Bool? {
        try await redis.send(["HGET", customerKey(publisher, customer), "consumptionConsent"]).string.map { $0 == "1" }
    }

    /// Keeps what was sent to Apple for a consumption request (two days: Apple takes answers for 12 hours).
    package func keepConsumptionSent(_ json: String, publisher: String, transactionId: String, askedMs: Int64) async throws {
        let key = keys.consumptionSent(publisher, transactionId: transactionId, askedMs: askedMs)
        _ = try await redis.send(["SET", key, json, "EX", String(2 * 86_400)])
    }

    /// What was sent to Apple for a consumption request, if it was.
    package func consumptionSent(publisher: String, transactionId: String, askedMs: Int64) async throws -> String? {
        try await redis.send(["GET", keys.consumptionSent(publisher, transactionId: transactionId, askedMs: askedMs)]).string
    }

    /// How many milliseconds Apple's pause of the publisher has left (0 or less: none).
    package func applePauseRemaining(publisher: String) async throws -> Int {
        try await redis.send(["PTTL", keys.applePause(publisher)]).int ?? -2
    }

    /// Pauses the publisher's Apple calls until `untilMs` (expiring in `remainingMs`), unless
    /// a later pause is set.
    package func extendApplePause(publisher: String, untilMs: Int64, remainingMs: Int64) async throws {
        _ = try await redis.run(
            Self.extendPause, keys: [keys.applePause(publisher)], arguments: [String(untilMs), String(remainingMs)])
    }

    /// Sets a pause's end (`ARGV[1]`, ms) expiring in `ARGV[2]` ms, unless a later one is set.
    static let extendPause = RedisScript(
        name: "apple-pause-extend",
        source: """
            local current = tonumber(redis.call('GET', KEYS[1]) or '0')
            if current >= tonumber(ARGV[1]) then return 0 end
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return 1
            """)

    /// Marks a notification applied, for 30 days at least (Apple retries one for about three;
    /// a reconcile finds it in Apple's history later, and a marker spares it a second apply).
    package func markApplied(publisher: String, notification id: String) async throws {
        try await appliedNotifications.insert(publisher: publisher, notification: id, nowMs: Self.nowMs())
    }

    private static func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    // MARK: Renewal index

    /// A subscription's renewal check and when it is due: read from the renewal index, or to
    /// put in it.
    package struct DueRenewal: Sendable, Hashable {
        package var publisher: String
        package var originalTransactionId: String
        /// When it is due (ms since 1970, App Store time).
        package var dueMs: Int64
        /// To put in the index only where it has no date for the subscription (`ZADD NX`):
        /// one already due, or held by a sweep's claim, stands.
        package var ifAbsent: Bool

        package init(publisher: String, originalTransactionId: String, dueMs: Int64, ifAbsent: Bool = false) {
            self.publisher = publisher
            self.originalTransactionId = originalTransactionId
            self.dueMs = dueMs
            self.ifAbsent = ifAbsent
        }
    }

    /// Records when each subscription's renewal check is due, replacing earlier dates unless
    /// `ifAbsent`.
    package func scheduleRenewalChecks(_ checks: [DueRenewal]) async throws {
        guard !checks.isEmpty else { return }
        _ = try await redis.pipeline(renewalCheckCalls(checks).compactMap { if case .command(let c) = $0 { c } else { nil } })
    }

    func renewalCheckCalls(_ checks: [DueRenewal]) -> [RedisCall] {
        checks.map {
            .command(
                ["ZADD", keys.renewals] + ($0.ifAbsent ? ["NX"] : [])
                    + [String($0.dueMs), keys.renewalMember($0.publisher, $0.originalTransactionId)])
        }
    }

    /// Drops a subscription from the renewal index: nothing is left to check.
    package func forgetRenewalCheck(publisher: String, originalTransactionId: String) async throws {
        _ = try await redis.send(["ZREM", keys.renewals, keys.renewalMember(publisher, originalTransactionId)])
    }

    /// Claims up to `limit` subscriptions whose checks were due at `cutoffMs` or before,
    /// oldest first: in the same script each one's due date moves to `leaseUntilMs`, so no
    /// other sweep (of any queue) claims it meanwhile, and a check that does not end (its
    /// job lost, dead, or refused for good) leaves the head of the index to the others and
    /// is claimed again once the lease has passed. The check's own write replaces the lease
    /// with the next due date, or removes the entry.
    package func claimDueRenewalChecks(cutoffMs: Int64, leaseUntilMs: Int64, limit: Int) async throws -> [DueRenewal] {
        let flat =
            try await redis.run(
                Self.claimDue, keys: [keys.renewals], arguments: [String(cutoffMs), String(leaseUntilMs), String(limit)]
            ).array?.compactMap(\.string) ?? []
        var due: [DueRenewal] = []
        for index in stride(from: 0, to: flat.count - 1, by: 2) {
            let parts = flat[index].split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2, let score = Double(flat[index + 1]) else { continue }
            due.append(DueRenewal(publisher: parts[0], originalTransactionId: parts[1], dueMs: AppleTimestamp.milliseconds(score)))
        }
        return due
    }

    /// Gives claimed checks back (their enqueue failed): each entry still at its lease goes
    /// back to its due date (`ZADD XX LT`: a date a write set meanwhile that is earlier stays).
    package func releaseRenewalChecks(_ claimed: [DueRenewal]) async throws {
        guard !claimed.isEmpty else { return }
        _ = try await redis.pipeline(
            claimed.map {
                ["ZADD", keys.renewals, "XX", "LT", String($0.dueMs), keys.renewalMember($0.publisher, $0.originalTransactionId)]
            })
    }

    /// KEYS: the renewal index. ARGV: cutoff ms, lease-until ms, limit. Returns member, score, ...
    static let claimDue = RedisScript(
        name: "claim-due-renewal-checks",
        source: """
            local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
            for i = 1, #due, 2 do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], due[i]) end
            return due
            """)
}
