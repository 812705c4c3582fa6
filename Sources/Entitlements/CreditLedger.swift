import Foundation

/// A customer's credits (calling minutes, tokens): every change keyed, so a replayed job,
/// a duplicate notification or a resubmitted receipt changes nothing. The balance may go
/// negative when credits already spent are refunded.
public struct CreditLedger: Sendable, Hashable, Codable {
    public struct Entry: Sendable, Hashable, Codable {
        public enum Kind: String, Sendable, Hashable, Codable {
            case purchase, clawback, reinstatement
        }

        public var kind: Kind
        public var transactionId: String
        public var offerId: String
        public var amount: Int
        public var at: Date
        /// What the purchase cost (`PurchaseFact.price`), on purchase entries.
        public var price: String?
        public var currency: String?
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

    /// Takes back what a refunded transaction credited, once per refund (a reversed refund
    /// can be refunded again); returns the amount removed.
    @discardableResult
    mutating func clawBack(transactionId: String, at date: Date) -> Int {
        let clawedBack = entries.filter { $0.transactionId == transactionId && $0.kind == .clawback }.count
        let reinstated = entries.filter { $0.transactionId == transactionId && $0.kind == .reinstatement }.count
        guard clawedBack == reinstated, let credited = entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })
        else { return 0 }
        entries.append(Entry(kind: .clawback, transactionId: transactionId, offerId: credited.offerId, amount: -credited.amount, at: date))
        return credited.amount
    }

    /// Gives back what a clawback took when Apple reverses the refund; a later refund can
    /// claw back again. Returns the amount given back.
    @discardableResult
    mutating func reinstate(transactionId: String, at date: Date) -> Int {
        let clawedBack = entries.filter { $0.transactionId == transactionId && $0.kind == .clawback }.count
        let reinstated = entries.filter { $0.transactionId == transactionId && $0.kind == .reinstatement }.count
        guard clawedBack > reinstated, let credited = entries.first(where: { $0.kind == .purchase && $0.transactionId == transactionId })
        else { return 0 }
        entries.append(
            Entry(kind: .reinstatement, transactionId: transactionId, offerId: credited.offerId, amount: credited.amount, at: date))
        return credited.amount
    }
}
