/// Every Redis key and channel of the entitlement store, built in one place, as `QueueKeys`
/// is for the queue (`P` a publisher, `C` a customer, `T` an original transaction id, `NN`
/// the customer's partition, 00 to 15):
///
/// - `{prefix}:ent:{P/NN}:customer:C`: hash `doc` (`StoredCustomer.Record`: the version, the ids
///   of the customer's lifecycle events in the log, the fences and `CustomerEntitlements` as
///   `StoredCustomer` writes it), `outbox` (follow-up jobs written with the change, enqueued
///   after it); or, as versions before 2026-11-26 wrote it, `doc`, `v`, `ev` and `fence:T`
/// - `{prefix}:ent:{P/NN}:events`: stream, the event log of the partition's customers: one
///   entry per lifecycle event (`e`: the event's JSON) and per change of report pieces (`d`),
///   appended in the same script that writes the customer (same hash tag, one Cluster slot)
/// - `{prefix}:ent:{P/NN}:holders:E`, `{prefix}:ent:{P/NN}:offer-holders:O`: sorted sets of
///   the partition's customers who have had entitlement E (offer O), scored by when that
///   access ends (ms, `+inf` for never); written in the script that writes the customer
/// - `{prefix}:ent:{P/NN}:devices:C`: hash, the customer's APNs devices (token -> JSON)
/// - `{prefix}:ent:P:device:TOKEN`: string, the customer a device token belongs to (the
///   newest who registered it; a device listed by another customer is not theirs any more)
/// - `{prefix}:ent:P:push:{ID}`, `...:{ID}:audience`, `...:{ID}:results`, `...:{ID}:batches`:
///   a push's record, its audience (list of customers, fixed once found), each device's
///   result (hash token -> JSON) and its finished batches (set); seven days
/// - `{prefix}:rep:{P}:...`: the reports kept from the log (`ReportKeys`)
/// - `{prefix}:ent:P:owner:T`: string, the customer holding T
/// - `{prefix}:ent:P:sharers:T`: set, the customers sharing T with its owner (`share` policy)
/// - `{prefix}:ent:P:former:T`: set, the customers who held T before a transfer
/// - `{prefix}:ent:P:unheld:{T}`: hash, Apple's signed word on T kept while nobody held it
///   (transaction id -> the signed view as JSON), in the fence's slot; or, as versions before
///   2026-11-28 wrote it, `{prefix}:ent:P:unheld:T`
/// - `{prefix}:ent:P:receipt:T`: string, the latest app receipt that proved T
/// - `{prefix}:ent:P:applied:{P/applied-B}:G`: set, the notifications applied in generation G (five
///   days since 1970) whose id's digest starts with B (two hex digits): 22 hex digits of the
///   digest each (`AppliedNotifications`); expires 30 days after the generation's end, plus
///   B minutes
/// - `{prefix}:ent:P:notification:N`: "1" while notification N counts as applied, as
///   versions before 2026-11-27 wrote it (30 days; still read)
/// - `{prefix}:ent:P:lock:{T}`, `{prefix}:ent:P:fence:{T}`: `TransactionLock`'s lease and
///   fence, hash-tagged by T so both sit in one Redis Cluster slot
/// - `{prefix}:ent:P:consumption:T:M`: string, the consumption information sent for T's
///   request of M (JSON), for two days
/// - `{prefix}:ent:P:import:I`, `...:I:jobs`, `...:I:refused`: an import's record, lines'
///   jobs and refusals (30 days)
/// - `{prefix}:ent:P:apple:pause`: string, set while Apple asked the publisher to wait (429)
/// - `{prefix}:ent:P:reconciled:B:E`: hash, how far app B's notifications in environment E
///   have been reconciled (`through`, ms) and the page a reconcile under way reached
///   (`start`, `end`, `token`)
/// - `{prefix}:ent:renewals`: sorted set of `P/T` by when its renewal check is due (ms)
/// - channel `{prefix}:ent:P:changes`: `{"publisher", "customer", "version"}` per change
package struct EntitlementKeys: Sendable, Hashable {
    package let prefix: String

    package init(prefix: String) { self.prefix = prefix }

    private func key(_ publisher: String, _ kind: String, _ name: String) -> String { "\(prefix):ent:\(publisher):\(kind):\(name)" }

    /// How many partitions a publisher's customers (and its event log) are spread over: each
    /// is one Redis Cluster slot, so a publisher's customers are not all on one node. Fixed:
    /// a customer's keys are found by it.
    package static let partitions = 16

    /// A customer's partition: FNV-1a of the id, modulo `partitions`.
    package static func partition(of customer: String) -> Int {
        var hash: UInt32 = 2_166_136_261
        for byte in customer.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return Int(hash % UInt32(partitions))
    }

    /// The hash tag of a publisher's partition: `{P/NN}`.
    package static func tag(_ publisher: String, partition: Int) -> String {
        "{\(publisher)/\(partition < 10 ? "0" : "")\(partition)}"
    }

    package func customer(_ publisher: String, _ customer: String) -> String {
        "\(prefix):ent:\(Self.tag(publisher, partition: Self.partition(of: customer))):customer:\(customer)"
    }
    /// The event log of one partition of a publisher's customers.
    package func events(_ publisher: String, partition: Int) -> String {
        "\(prefix):ent:\(Self.tag(publisher, partition: partition)):events"
    }
    /// The event log a customer's events are in.
    package func events(_ publisher: String, customer: String) -> String {
        events(publisher, partition: Self.partition(of: customer))
    }
    /// The partition's holders of an entitlement, scored by when their access ends.
    package func holders(_ publisher: String, entitlement: String, partition: Int) -> String {
        "\(prefix):ent:\(Self.tag(publisher, partition: partition)):holders:\(entitlement)"
    }
    /// The partition's holders of an offer, scored by when their access ends.
    package func offerHolders(_ publisher: String, offerId: String, partition: Int) -> String {
        "\(prefix):ent:\(Self.tag(publisher, partition: partition)):offer-holders:\(offerId)"
    }
    /// A customer's APNs devices: in the customer's slot.
    package func devices(_ publisher: String, _ customer: String) -> String {
        "\(prefix):ent:\(Self.tag(publisher, partition: Self.partition(of: customer))):devices:\(customer)"
    }
    /// Who a device token belongs to now.
    package func deviceOwner(_ publisher: String, token: String) -> String { key(publisher, "device", token) }
    /// A push's keys (`part`: "" the record, ":audience", ":results", ":batches"), hash-tagged by its id.
    package func push(_ publisher: String, _ id: String, _ part: String = "") -> String { key(publisher, "push", "{\(id)}" + part) }
    /// Where customers were kept before the event log (`entitle migrate` moves them).
    package func legacyCustomer(_ publisher: String, _ customer: String) -> String { key(publisher, "customer", customer) }
    package func owner(_ publisher: String, _ originalTransactionId: String) -> String { key(publisher, "owner", originalTransactionId) }
    package func sharers(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "sharers", originalTransactionId)
    }
    package func formerHolders(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "former", originalTransactionId)
    }
    /// Apple's signed word (a refund, its reversal) about a purchase nobody held when it came:
    /// hash-tagged by T, in the slot of the purchase's fence, which the keeping checks.
    package func unheldFacts(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "unheld", "{\(originalTransactionId)}")
    }
    /// Where versions before 2026-11-28 kept it, in no slot of the fence's: still read, and
    /// moved to `unheldFacts` by the purchase's next keeping.
    package func legacyUnheldFacts(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "unheld", originalTransactionId)
    }
    package func receipt(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "receipt", originalTransactionId)
    }
    package func notification(_ publisher: String, _ id: String) -> String { key(publisher, "notification", id) }
    /// The set of applied notifications of a digest bucket and generation, hash-tagged by
    /// the publisher and the bucket (a publisher's 256 buckets spread over a cluster's slots,
    /// apart from its partitions' `{P/NN}`).
    package func appliedNotifications(_ publisher: String, bucket: String, generation: Int64) -> String {
        key(publisher, "applied", "{\(publisher)/applied-\(bucket)}:\(generation)")
    }
    package func lock(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "lock", "{\(originalTransactionId)}")
    }
    package func fence(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "fence", "{\(originalTransactionId)}")
    }
    /// What was sent to Apple for a consumption request (transaction T, asked at ms M), kept
    /// two days so a job rerun after a crash does not send it twice.
    package func consumptionSent(_ publisher: String, transactionId: String, askedMs: Int64) -> String {
        key(publisher, "consumption", "\(transactionId):\(askedMs)")
    }
    /// An import's record (`part`: "" the hash, ":jobs" the list, ":refused" the refusals).
    package func importRecord(_ publisher: String, _ id: String, _ part: String = "") -> String {
        key(publisher, "import", id + part)
    }
    /// Set while Apple asked the publisher to wait (429 with Retry-After); expires at its end.
    package func applePause(_ publisher: String) -> String { key(publisher, "apple", "pause") }
    package func reconciled(_ publisher: String, bundleId: String, environment: String) -> String {
        key(publisher, "reconciled", "\(bundleId):\(environment)")
    }
    package var renewals: String { "\(prefix):ent:renewals" }
    /// A renewal index member.
    package func renewalMember(_ publisher: String, _ originalTransactionId: String) -> String { "\(publisher)/\(originalTransactionId)" }
    package func channel(_ publisher: String) -> String { "\(prefix):ent:\(publisher):changes" }
}
