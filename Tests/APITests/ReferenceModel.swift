import Foundation

/// What Entitle should answer, worked out in plain Swift from what the walk did and what
/// Apple (the simulator) says happened: who holds each purchase when (the `transfer`
/// policy), what each transaction gives and for how long, and the credits ledger. No Redis,
/// no Entitle code: an independent reading of the rules in docs/entitlements.md.
struct ReferenceModel {
    enum Kind { case consumable, nonConsumable, nonRenewing, autoRenewable }

    struct Product {
        var id: String
        var offer: String
        var kind: Kind
        var entitlements: [String]
        var credits = 0
        var days = 0
    }

    /// The demo catalog, as Config/catalog.development.json sells it.
    static let products: [String: Product] = Dictionary(
        uniqueKeysWithValues: [
            Product(id: "com.entitle.demo.credits.100", offer: "credits-100", kind: .consumable, entitlements: [], credits: 100),
            Product(id: "com.entitle.demo.issue.2026.11", offer: "issue-2026-11", kind: .nonConsumable, entitlements: ["issue:2026-11"]),
            Product(id: "com.entitle.demo.issue.2026.12", offer: "issue-2026-12", kind: .nonConsumable, entitlements: ["issue:2026-12"]),
            Product(id: "com.entitle.demo.pass.30days", offer: "pass-30", kind: .nonRenewing, entitlements: ["premium"], days: 30),
            Product(id: "com.entitle.demo.premium.monthly", offer: "premium", kind: .autoRenewable, entitlements: ["hd", "premium"]),
            Product(id: "com.entitle.demo.premium.annual", offer: "premium", kind: .autoRenewable, entitlements: ["hd", "premium"]),
            Product(id: "com.entitle.demo.basic.monthly", offer: "basic", kind: .autoRenewable, entitlements: ["basic"]),
        ].map { ($0.id, $0) })

    /// One App Store transaction as Apple tells it now.
    struct Transaction: Equatable {
        var id: String
        var original: String
        var productId: String
        var purchase: Date
        var expires: Date?
        var revoked: Date?
    }

    /// One purchase (an original transaction): its transactions in order, and the grace
    /// periods Apple granted when renewals failed.
    struct Purchase {
        var original: String
        var productId: String
        var kind: Kind
        var transactions: [String] = []
        /// Transaction id -> the end of the grace period Apple granted after it.
        var graceEnds: [String: Date] = [:]
        /// Apple's status now (1 active, 2 expired, 3 billing retry, 4 grace, 5 revoked).
        var appleStatus = 1
    }

    /// A customer's hold on a purchase: `from` `nil` is from its purchase (the first claim).
    struct Stint {
        var customer: String
        var from: Date?
        var to: Date?
    }

    struct LedgerEntry {
        var customer: String
        var amount: Int
        var at: Date
    }

    var transactions: [String: Transaction] = [:]
    var purchases: [String: Purchase] = [:]
    var stints: [String: [Stint]] = [:]
    var ledger: [LedgerEntry] = []
    /// What each consumable's last refund took (a reversal gives exactly that back).
    var clawedBack: [String: Int] = [:]

    // MARK: What the walk does

    func owner(_ original: String) -> String? { stints[original]?.last { $0.to == nil }?.customer }

    /// How a claim reached Entitle: the publisher's backend (a secret key, or a route that
    /// takes the publisher's credentials), or an app with proof Apple signed at `signedAt`.
    enum Road: Equatable {
        case backend
        case app(signedAt: Date)
    }

    /// What a claim does (the preflight says it before): the purchase is, or stays, the
    /// claimant's; it moves to them; or the holder keeps it.
    enum ClaimOutcome: String { case granted, transfer, refused }

    /// How old an app's proof may be for its claim to move a purchase another customer holds
    /// (the demo publisher's `proofMaxAgeSeconds`, the default day).
    static let proofMaxAge: TimeInterval = 86_400

    /// What `customer`'s claim on a purchase at `date` does, by the rules: the claimant holds
    /// it already, so it stays theirs; an app claims a purchase (first, or from another
    /// customer) only with proof Apple signed within a day (nothing in the walk's purchases
    /// carries an appAccountToken); nobody holds it, so it is theirs; a consumable stays with
    /// whoever was credited; the backend moves it (the `transfer` policy).
    func outcome(of original: String, by customer: String, road: Road, at date: Date) -> ClaimOutcome {
        guard let purchase = purchases[original] else { return .granted }
        let current = owner(original)
        if current == customer { return .granted }
        var stale = false
        if case .app(let signedAt) = road { stale = date.timeIntervalSince(signedAt) > Self.proofMaxAge }
        guard current != nil else { return stale ? .refused : .granted }
        if purchase.kind == .consumable || stale { return .refused }
        return .transfer
    }

    /// `customer` presents a purchase at `date` (the `transfer` policy): nobody holds it, so
    /// it is theirs from its purchase; another customer holds it, so it moves at `date` unless
    /// `outcome` refuses the claim. A consumable stays with whoever was credited.
    mutating func claim(_ original: String, by customer: String, road: Road = .backend, at date: Date) {
        guard let purchase = purchases[original] else { return }
        guard outcome(of: original, by: customer, road: road, at: date) != .refused else { return }
        guard let current = owner(original) else {
            stints[original, default: []].append(Stint(customer: customer, from: nil, to: nil))
            if purchase.kind == .consumable, let transaction = transactions[original], let product = Self.products[purchase.productId] {
                ledger.append(LedgerEntry(customer: customer, amount: product.credits, at: transaction.purchase))
                if let revoked = transaction.revoked {
                    ledger.append(LedgerEntry(customer: customer, amount: -clawback(product.credits, from: customer), at: revoked))
                }
            }
            return
        }
        guard current != customer, purchase.kind != .consumable else { return }
        transfer(original, to: customer, at: date)
    }

    /// The publisher moves a purchase (`POST /v1/transfers`), or a claim does.
    mutating func transfer(_ original: String, to customer: String, at date: Date) {
        guard var list = stints[original], let index = list.lastIndex(where: { $0.to == nil }), list[index].customer != customer else {
            return
        }
        list[index].to = date
        list.append(Stint(customer: customer, from: date, to: nil))
        stints[original] = list
    }

    /// A consumable's refund (`revoked`) or its reversal (`revoked == nil`, at `date`) moves credits.
    mutating func creditsFollow(_ transactionId: String, wasRevoked: Bool, at date: Date) {
        guard let transaction = transactions[transactionId], let purchase = purchases[transaction.original], purchase.kind == .consumable,
            let customer = owner(transaction.original), let product = Self.products[purchase.productId]
        else { return }
        if let revoked = transaction.revoked, !wasRevoked {
            let taken = clawback(product.credits, from: customer)
            ledger.append(LedgerEntry(customer: customer, amount: -taken, at: revoked))
            clawedBack[transactionId] = taken
        } else if transaction.revoked == nil, wasRevoked {
            // A reversal gives back exactly what the refund took.
            ledger.append(LedgerEntry(customer: customer, amount: clawedBack[transactionId] ?? product.credits, at: date))
        }
    }

    /// The walk refunds in full (the simulator's default refund): the share is all of a
    /// purchase's credits, and a refund takes no more than the customer's balance holds.
    func clawback(_ share: Int, from customer: String) -> Int {
        min(share, max(0, ledger.filter { $0.customer == customer }.reduce(0) { $0 + $1.amount }))
    }

    // MARK: What Entitle should answer

    func held(_ original: String, by customer: String, at date: Date) -> Bool {
        guard let first = purchases[original]?.transactions.first.flatMap({ transactions[$0] }), first.purchase <= date else {
            return false
        }
        return (stints[original] ?? []).contains { stint in
            stint.customer == customer && (stint.from.map { $0 <= date } ?? true) && (stint.to.map { date < $0 } ?? true)
        }
    }

    /// When a transaction's access ends, `nil` for never: its expiry (or the grace Apple
    /// granted, until a renewal ends it), the term of a pass, a refund, or a product change
    /// that took effect at once.
    func end(of transaction: Transaction) -> Date? {
        guard let purchase = purchases[transaction.original], let product = Self.products[transaction.productId] else { return nil }
        var end: Date?
        switch purchase.kind {
        case .consumable: end = transaction.purchase
        case .nonConsumable: end = nil
        case .nonRenewing: end = transaction.purchase.addingTimeInterval(Double(product.days) * 86_400)
        case .autoRenewable:
            let expires = transaction.expires ?? transaction.purchase
            var natural = max(expires, purchase.graceEnds[transaction.id] ?? expires)
            let newer = purchase.transactions.compactMap { transactions[$0] }.filter { $0.purchase > transaction.purchase }
            for next in newer {
                let productChange = next.productId != transaction.productId && next.purchase < expires
                let recovery = natural > expires && next.purchase >= expires && next.purchase < natural
                if productChange || recovery { natural = min(natural, next.purchase) }
            }
            end = natural
        }
        if let revoked = transaction.revoked { end = min(end ?? revoked, revoked) }
        return end
    }

    func entitlements(of customer: String, at date: Date) -> Set<String> {
        var granted = Set<String>()
        for (original, purchase) in purchases where held(original, by: customer, at: date) {
            let stint = (stints[original] ?? []).last { $0.customer == customer && ($0.from.map { $0 <= date } ?? true) }
            for transaction in purchase.transactions.compactMap({ transactions[$0] }) {
                let start = max(transaction.purchase, stint?.from ?? transaction.purchase)
                guard start <= date, end(of: transaction).map({ date < $0 }) ?? true else { continue }
                granted.formUnion(Self.products[transaction.productId]?.entitlements ?? [])
            }
        }
        return granted
    }

    /// Whether a period of `offer` gives the customer access at `date` (the access check).
    func access(of customer: String, offer: String, at date: Date) -> Bool {
        purchases.contains { original, purchase in
            guard held(original, by: customer, at: date) else { return false }
            let stint = (stints[original] ?? []).last { $0.customer == customer && ($0.from.map { $0 <= date } ?? true) }
            return purchase.transactions.compactMap { transactions[$0] }.contains { transaction in
                let start = max(transaction.purchase, stint?.from ?? transaction.purchase)
                return Self.products[transaction.productId]?.offer == offer && Self.products[transaction.productId]?.kind != .consumable
                    && start <= date && (end(of: transaction).map { date < $0 } ?? true)
            }
        }
    }

    func balance(of customer: String, at date: Date) -> Int {
        ledger.filter { $0.customer == customer && $0.at <= date }.reduce(0) { $0 + $1.amount }
    }

    /// The customer's subscriptions at `date` with their status then, by original transaction id.
    func subscriptions(of customer: String, at date: Date) -> [String: String] {
        var answer: [String: String] = [:]
        for (original, purchase) in purchases where purchase.kind == .autoRenewable && held(original, by: customer, at: date) {
            let known = purchase.transactions.compactMap { transactions[$0] }.filter { $0.purchase <= date }
            guard let latest = known.max(by: { ($0.purchase, $0.id) < ($1.purchase, $1.id) }) else { continue }
            let expires = latest.expires ?? latest.purchase
            let grace = purchase.graceEnds[latest.id].flatMap { $0 > expires ? $0 : nil }
            // Billing retry is what Apple says of the subscription now: known to its holder for
            // its latest transaction; a former holder's history shows the lapse as expired.
            let isCurrent = latest.id == purchase.transactions.last && owner(original) == customer
            if let revoked = latest.revoked, revoked <= date {
                answer[original] = "revoked"
            } else if expires > date {
                answer[original] = "active"
            } else if let grace, grace > date {
                answer[original] = "gracePeriod"
            } else if isCurrent, purchase.appleStatus == 3 || purchase.appleStatus == 4 {
                answer[original] = "billingRetry"
            } else {
                answer[original] = "expired"
            }
        }
        return answer
    }
}
