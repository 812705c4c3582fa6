import Foundation

/// Whether a customer's claim on a purchase goes through, and why: the publisher's transfer
/// policy, and for a claim an app makes on a purchase another customer holds, whether Apple
/// vouches for it now.
///
/// A signed transaction never expires: one copied from a log, a support ticket or another
/// device verifies for as long as Apple's certificates do. So an app (whose key is public)
/// may claim a purchase (take it from another customer, share it, or be the first to claim
/// it) only when Apple vouches that the claimant holds it now: the purchase's `appAccountToken` names the claimant (Apple's own
/// binding of a purchase to an account), or the proof the app posted was signed by Apple
/// recently (a signed transaction's `signedDate`, an app receipt's creation date, within the
/// publisher's `proofMaxAgeSeconds`): StoreKit signs again what a device holds whenever it
/// syncs, so a genuine restore always has fresh proof. The publisher's backend (a secret key)
/// is trusted to have checked its customer, and keeps the policy as it is.
///
/// What Apple answers Entitle itself about the purchase (its statuses) is current, but says
/// nothing of who sent the proof, so it vouches only through an `appAccountToken` it carries.
public struct ClaimRule: Sendable, Hashable {
    /// Who made the claim.
    public enum Road: String, Sendable, Hashable, Codable {
        /// An app, with the publisher's (public) app key and its customer's token.
        case appKey
        /// The publisher's backend, with a secret key (the Cleeng route, the CLI, the queue).
        case secretKey
    }

    /// What the claim does to a purchase.
    public enum Outcome: String, Sendable, Hashable, Codable {
        /// Nobody else holds it: it is (or stays) the claimant's.
        case granted
        /// Another customer holds it and it moves to the claimant (`transfer` policy).
        case transfer
        /// Another customer holds it and both have it (`share` policy).
        case share
        /// The holder keeps it; `reason` says why.
        case refused
    }

    /// Why Apple's word is taken that the claimant holds the purchase now.
    public enum Voucher: String, Sendable, Hashable, Codable {
        /// The purchase's `appAccountToken` is the claimant's.
        case appAccountToken
        /// Apple signed the proof the app posted within the publisher's window.
        case recentSignature
        /// The publisher's backend claimed it (a secret key).
        case secretKey
    }

    public struct Decision: Sendable, Hashable, Codable {
        public var outcome: Outcome
        /// Whether another customer holds the purchase.
        public var heldByAnotherCustomer: Bool
        /// Why the claim was believed, when it took or shared another customer's purchase.
        public var vouchedBy: Voucher?
        public var reason: EntitlementDecision.Refusal?
        public var message: String?

        public init(
            outcome: Outcome, heldByAnotherCustomer: Bool, vouchedBy: Voucher? = nil, reason: EntitlementDecision.Refusal? = nil,
            message: String? = nil
        ) {
            self.outcome = outcome
            self.heldByAnotherCustomer = heldByAnotherCustomer
            self.vouchedBy = vouchedBy
            self.reason = reason
            self.message = message
        }

        /// A claim on a purchase nobody else holds.
        public static let unheld = Decision(outcome: .granted, heldByAnotherCustomer: false)
    }

    public var road: Road
    public var policy: TransferPolicy
    /// How old the app's proof may be, in seconds.
    public var proofMaxAge: TimeInterval

    public init(road: Road, policy: TransferPolicy, proofMaxAgeSeconds: Int) {
        self.road = road
        self.policy = policy
        self.proofMaxAge = TimeInterval(proofMaxAgeSeconds)
    }

    public init(road: Road, publisher: Publisher) {
        self.init(road: road, policy: publisher.transferPolicy, proofMaxAgeSeconds: publisher.proofMaxAgeSeconds)
    }

    /// Who holds a purchase when a customer claims it.
    public enum Holder: Sendable, Hashable {
        /// Nobody yet: the claim makes the claimant its holder.
        case nobody
        /// The claimant, or (under `share`) the claimant shares it already.
        case claimant
        /// Another customer.
        case another
    }

    /// Decides a claim on one purchase (an original transaction).
    ///
    /// - Parameters:
    ///   - holder: who holds the purchase now.
    ///   - consumable: its credits were delivered to that customer (they never move).
    ///   - tokenNamesClaimant: a verified transaction of the purchase carries the claimant's
    ///     `appAccountToken` (one carrying another customer's is refused before this).
    ///   - proofSignedAt: when Apple signed the proof the claimant posted; `nil` when unknown.
    ///   - now: the App Store's time.
    public func decide(holder: Holder, consumable: Bool, tokenNamesClaimant: Bool, proofSignedAt: Date?, now: Date) -> Decision {
        let held = holder == .another
        func refused(_ reason: EntitlementDecision.Refusal, _ message: String) -> Decision {
            Decision(outcome: .refused, heldByAnotherCustomer: held, reason: reason, message: message)
        }
        if holder == .claimant { return .unheld }
        if held, consumable {
            return refused(.ownedByAnotherCustomer, "this consumable was credited to another customer; its credits are delivered once")
        }
        if held, policy == .keep {
            return refused(.ownedByAnotherCustomer, "another customer holds this purchase and the publisher keeps purchases with them")
        }
        // An app's claim, whether or not anyone holds the purchase yet: a first claim with old
        // proof would let whoever copied it take a purchase its buyer has not claimed yet.
        let voucher: Voucher
        if road == .secretKey {
            guard held else { return .unheld }
            voucher = .secretKey
        } else if tokenNamesClaimant {
            voucher = .appAccountToken
        } else if let signed = proofSignedAt, now.timeIntervalSince(signed) <= proofMaxAge {
            voucher = .recentSignature
        } else {
            let age =
                proofSignedAt.map { "was signed by Apple \(Self.describe(now.timeIntervalSince($0))) ago" } ?? "carries no signing date"
            let whose = held ? "another customer holds this purchase, and " : ""
            return refused(
                .staleProofOfPurchase,
                "\(whose)the proof sent \(age), more than the \(Self.describe(proofMaxAge)) allowed for an app's claim: ask StoreKit for the current transaction (or refresh the receipt) and send it again, or set appAccountToken at purchase"
            )
        }
        guard held else { return Decision(outcome: .granted, heldByAnotherCustomer: false, vouchedBy: voucher) }
        return Decision(outcome: policy == .share ? .share : .transfer, heldByAnotherCustomer: true, vouchedBy: voucher)
    }

    /// A span in the largest whole unit (`3 days`, `5 hours`, `40 minutes`).
    static func describe(_ seconds: TimeInterval) -> String {
        let whole = Int(max(0, min(seconds, 1e12)))
        for (unit, size) in [("day", 86_400), ("hour", 3_600), ("minute", 60)] where whole >= size {
            let count = whole / size
            return "\(count) \(unit)\(count == 1 ? "" : "s")"
        }
        return "\(whole) seconds"
    }
}
