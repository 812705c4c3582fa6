import Foundation

/// A customer's credits (calling minutes, tokens): every change keyed, so a replayed job,
/// a duplicate notification or a resubmitted receipt changes nothing. A refund takes back
/// no more than the balance holds; what it could not take is recorded as a shortfall.
public struct CreditLedger: Sendable, Hashable, Codable {
    public struct Entry: Sendable, Hashable, Codable {
        public enum Kind: String, Sendable, Hashable, Codable {
            case purchase, clawback, reinstatement
            /// Credits the publisher's app used (`POST /v1/customers/{id}/credits/spend`).
            case spend
        }

        public var kind: Kind
        public var transactionId: String
        public var offerId: String
        public var amount: Int
        public var at: Date
        /// What the purchase cost (`PurchaseFact.price`), on purchase entries.
        public var price: String?
        public var currency: String?
        /// Clawbacks: the share refunded, in milliunits of a percent (100000 for a full refund).
        public var percentage: Int?
        /// Clawbacks: credits the refund should have taken but the balance no longer held
        /// (they were spent); Apple refunded them, the customer keeps having used them.
        public var shortfall: Int?
        /// Spends: the publisher's key for the use, so a repeat spends once.
        public var reference: String?
    }

    public private(set) var entries: [Entry] = []

    public init() {}

    public var balance: Int { entries.reduce(0) { $0 + $1.amount } }

    /// The balance as it stood at `date`: the entries dated then or before.
    public func balance(at date: Date) -> Int { entries.filter { $0.at <= date }.reduce(0) { $0 + $1.amount } }

    /// Credits a purchase once per transaction; returns the amount added (0 for a repeat).
    @discardableResult
    mutating func credit(
        _ amount: Int, transactionId: String, offerId: String, at date: Date, price: String? = nil, currency: String? = nil
    ) -> Int {
        if let index = entries.firstIndex(where: { $0.kind == .purchase && $0.transactionId == transactionId }) {
            // A later view may bring the price the first did not have: recorded, never credited twice.
            if entries[index].price == nil, let price {
                entries[index].price = price
                entries[index].currency = currency
            }
            return 0
        }
        entries.append(
            Entry(
                kind: .purchase, transactionId: transactionId, offerId: offerId, amount: amount, at: date, price: price, currency: currency)
        )
        return amount
    }

    /// Takes back the refunded share of what a transaction credited, once per refund (a
    /// reversed refund can be refunded again); returns the amount removed.
    ///
    /// The share is the credited amount times `share` (milliunits of a percent: 100000 is
    /// all of it) rounded to the nearest credit, halves up: a third of 300 refunded at
    /// 33333 is 99.999, so 100. Credits already spent cannot be taken: when the balance
    /// holds fewer than the share, what is left is taken and the rest is recorded as the
    /// entry's `shortfall`, so the balance never goes below zero by a refund.
    @discardableResult
    mutating func clawBack(transactionId: String, share: Int = 100_000, at date: Date) -> Int {
        let clawedBack = entries.filter { $0.transactionId == transactionId && $0.kind == .clawback }.count
        let reinstated = entries.filter { $0.transactionId == transactionId && $0.kind == .reinstatement }.count
        guard clawedBack == reinstated, let credited = entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })
        else { return 0 }
        let due = max(0, Self.share(of: credited.amount, milliunits: share))
        let taken = min(due, max(0, balance))
        var entry = Entry(kind: .clawback, transactionId: transactionId, offerId: credited.offerId, amount: -taken, at: date)
        entry.percentage = min(max(share, 0), 100_000)
        entry.shortfall = due > taken ? due - taken : nil
        entries.append(entry)
        return taken
    }

    /// Brings a transaction's outstanding clawback to `share` when Apple's signed word on the
    /// refund's share came after it was clawed back (a receipt or a V1 notification says a
    /// refund, not how much, so the whole was taken): the entry is rewritten, giving back what
    /// it took beyond the share, or taking what it left (as far as the balance holds, the
    /// rest a shortfall). Returns the credits given back (negative: taken).
    @discardableResult
    mutating func settleClawback(transactionId: String, share: Int) -> Int {
        let reinstated = entries.filter { $0.transactionId == transactionId && $0.kind == .reinstatement }.count
        let clawbacks = entries.indices.filter { entries[$0].transactionId == transactionId && entries[$0].kind == .clawback }
        let share = min(max(share, 0), 100_000)
        guard clawbacks.count > reinstated, let index = clawbacks.last, entries[index].percentage != share,
            let credited = entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })
        else { return 0 }
        let due = max(0, Self.share(of: credited.amount, milliunits: share))
        let taken = -entries[index].amount
        let settled = due <= taken ? due : taken + min(due - taken, max(0, balance))
        entries[index].amount = -settled
        entries[index].percentage = share
        entries[index].shortfall = due > settled ? due - settled : nil
        return taken - settled
    }

    /// Gives back exactly what the last clawback of a transaction took, when Apple reverses
    /// the refund (a shortfall was never taken, so it is not given); a later refund can
    /// claw back again. Returns the amount given back.
    @discardableResult
    mutating func reinstate(transactionId: String, at date: Date) -> Int {
        let clawbacks = entries.filter { $0.transactionId == transactionId && $0.kind == .clawback }
        let reinstated = entries.filter { $0.transactionId == transactionId && $0.kind == .reinstatement }.count
        guard clawbacks.count > reinstated, let taken = clawbacks.last.map({ -$0.amount }),
            let credited = entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })
        else { return 0 }
        entries.append(Entry(kind: .reinstatement, transactionId: transactionId, offerId: credited.offerId, amount: taken, at: date))
        return taken
    }

    /// What spending `amount` credits did.
    public enum SpendOutcome: String, Sendable, Hashable, Codable {
        case spent
        /// This reference was spent before, for the same amount: nothing changed.
        case repeated
        /// This reference was spent before for another amount: a reference names one use, so
        /// nothing changed.
        case referenceConflict
        /// The balance holds fewer credits than asked for: nothing changed.
        case insufficientCredits
    }

    /// The publisher's app used credits (`reference` is its key for that use: once per key).
    public mutating func spend(_ amount: Int, reference: String, at date: Date) -> SpendOutcome {
        if let earlier = spend(reference: reference) { return -earlier.amount == amount ? .repeated : .referenceConflict }
        guard amount > 0, amount <= balance else { return .insufficientCredits }
        var entry = Entry(kind: .spend, transactionId: "", offerId: "", amount: -amount, at: date)
        entry.reference = reference
        entries.append(entry)
        return .spent
    }

    /// The spend made under `reference`, if any.
    public func spend(reference: String) -> Entry? {
        entries.first { $0.kind == .spend && $0.reference == reference }
    }

    /// `amount × milliunits / 100000`, rounded to the nearest whole, halves up; never traps
    /// (`milliunits` is clamped to 0...100000, so the result is at most `amount`).
    public static func share(of amount: Int, milliunits: Int) -> Int {
        let percentage = min(max(milliunits, 0), 100_000)
        let whole = amount / 100_000
        let rest = amount % 100_000
        return whole * percentage + (rest * percentage + 50_000) / 100_000
    }
}
