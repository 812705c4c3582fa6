/// Every Redis key and channel of the entitlement store, built in one place, as `QueueKeys`
/// is for the queue (`P` a publisher, `C` a customer, `T` an original transaction id):
///
/// - `{prefix}:ent:P:customer:C`: hash `doc` (JSON `CustomerEntitlements`), `v` (version),
///   `outbox` (follow-up jobs written with the change, enqueued after it), `fence:T`
/// - `{prefix}:ent:P:owner:T`: string, the customer holding T
/// - `{prefix}:ent:P:sharers:T`: set, the customers sharing T with its owner (`share` policy)
/// - `{prefix}:ent:P:former:T`: set, the customers who held T before a transfer
/// - `{prefix}:ent:P:receipt:T`: string, the latest app receipt that proved T
/// - `{prefix}:ent:P:notification:N`: "1" while notification N counts as applied
/// - `{prefix}:ent:P:lock:{T}`, `{prefix}:ent:P:fence:{T}`: `TransactionLock`'s lease and
///   fence, hash-tagged by T so both sit in one Redis Cluster slot
/// - `{prefix}:ent:renewals`: sorted set of `P/T` by when its renewal check is due (ms)
/// - channel `{prefix}:ent:P:changes`: `{"publisher", "customer", "version"}` per change
package struct EntitlementKeys: Sendable, Hashable {
    package let prefix: String

    package init(prefix: String) { self.prefix = prefix }

    private func key(_ publisher: String, _ kind: String, _ name: String) -> String { "\(prefix):ent:\(publisher):\(kind):\(name)" }

    package func customer(_ publisher: String, _ customer: String) -> String { key(publisher, "customer", customer) }
    package func owner(_ publisher: String, _ originalTransactionId: String) -> String { key(publisher, "owner", originalTransactionId) }
    package func sharers(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "sharers", originalTransactionId)
    }
    package func formerHolders(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "former", originalTransactionId)
    }
    package func receipt(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "receipt", originalTransactionId)
    }
    package func notification(_ publisher: String, _ id: String) -> String { key(publisher, "notification", id) }
    package func lock(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "lock", "{\(originalTransactionId)}")
    }
    package func fence(_ publisher: String, _ originalTransactionId: String) -> String {
        key(publisher, "fence", "{\(originalTransactionId)}")
    }
    package var renewals: String { "\(prefix):ent:renewals" }
    /// A renewal index member.
    package func renewalMember(_ publisher: String, _ originalTransactionId: String) -> String { "\(publisher)/\(originalTransactionId)" }
    package func channel(_ publisher: String) -> String { "\(prefix):ent:\(publisher):changes" }
}
