import EntitleCore
import Entitlements
import Foundation
import FuzzSupport
import RedisClient
import RedisTestSupport
import Testing

/// The holder indexes a push's audience is read from, against a reference model: after every
/// change of a seeded random walk over customers' histories, the customers the index names for
/// an entitlement (or an offer) at a moment are exactly those whose documents say they have
/// it then (the walk's generator: `FuzzSupport`'s seeded SplitMix64).
@Suite struct HolderIndexTests {
    static let offers: [(offer: String, entitlements: [String])] = [
        ("premium", ["premium", "hd"]), ("basic", ["basic"]), ("pass", ["premium"]),
    ]

    @Test(arguments: [1, 2, 3])
    func theIndexNamesExactlyTheCustomersTheirDocumentsSayHaveAccess(seed: UInt64) async throws {
        let store = EntitlementStore(redis: try await TestRedis.pool(), prefix: TestRedis.uniquePrefix("holders"), logger: TestRedis.logger)
        var random = Mutator(seed: seed)
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        let customers = (0..<24).map { "c\($0)@example.com" }
        var transaction = 0
        for step in 0..<300 {
            let customer = customers.randomElement(using: &random)!
            try await store.update(publisher: "demo", customer: customer) { state in
                switch Int.random(in: 0..<6, using: &random) {
                case 0, 1:
                    // A purchase that began before now and ends before or after it (or never).
                    transaction += 1
                    let (offer, entitlements) = Self.offers.randomElement(using: &random)!
                    let start = now.addingTimeInterval(-Double.random(in: 0...90, using: &random) * 86_400)
                    let end: Date? =
                        Int.random(in: 0..<8, using: &random) == 0
                        ? nil : start.addingTimeInterval(Double.random(in: 1...60, using: &random) * 86_400)
                    state.periods.append(
                        AccessPeriod(
                            transactionId: "t\(transaction)", originalTransactionId: "o\(transaction)", offerId: offer, productId: offer,
                            entitlements: entitlements, start: start, end: end))
                case 2:
                    // A refund ends one early.
                    guard let index = state.periods.indices.randomElement(using: &random) else { return }
                    state.periods[index].endedAt = max(
                        state.periods[index].start, now.addingTimeInterval(-Double.random(in: 0...5, using: &random) * 86_400))
                    state.periods[index].endReason = .refunded
                case 3:
                    // A refund reversed.
                    guard let index = state.periods.indices.randomElement(using: &random) else { return }
                    state.periods[index].endedAt = nil
                    state.periods[index].endReason = nil
                case 4:
                    // Transferred away.
                    guard let period = state.periods.randomElement(using: &random) else { return }
                    state.release(originalTransactionId: period.originalTransactionId, at: now.addingTimeInterval(-3600))
                default:
                    // Granted provisionally until a moment (or confirmed: the grant goes).
                    guard let period = state.periods.randomElement(using: &random) else { return }
                    state.provisional[period.originalTransactionId] =
                        Bool.random(using: &random) ? now.addingTimeInterval(Double.random(in: -2...10, using: &random) * 86_400) : nil
                }
            }
            guard step % 25 == 24 else { continue }
            try await Self.compare(store, customers, now: now, random: &random)
        }
        // Customers written before the indexes existed: none indexed, then `entitle migrate holders`.
        let keys = try await store.redis.send(["KEYS", store.prefix + ":ent:*holders:*"]).array?.compactMap(\.string) ?? []
        #expect(!keys.isEmpty)
        for key in keys { _ = try await store.redis.send(["DEL", key]) }
        #expect(try await store.holders(publisher: "demo", entitlement: "premium", after: 0).isEmpty)
        for customer in customers { _ = try await store.indexHolders(publisher: "demo", customer: customer) }
        try await Self.compare(store, customers, now: now, random: &random)
    }

    /// At moments from now on (every period began by now), the index and the documents agree.
    static func compare(_ store: EntitlementStore, _ customers: [String], now: Date, random: inout Mutator) async throws {
        for _ in 0..<4 {
            let moment = now.addingTimeInterval(Double.random(in: 0...70, using: &random) * 86_400)
            let ms = Int64((moment.timeIntervalSince1970 * 1000).rounded(.down))
            var expected: [String: Set<String>] = [:]
            var expectedOffers: [String: Set<String>] = [:]
            for customer in customers {
                let state = try await store.load(publisher: "demo", customer: customer).state
                for entitlement in state.entitlements(at: moment) { expected[entitlement, default: []].insert(customer) }
                for period in state.periods(at: moment) { expectedOffers[period.offerId, default: []].insert(customer) }
            }
            for entitlement in ["premium", "hd", "basic"] {
                let indexed = Set(try await store.holders(publisher: "demo", entitlement: entitlement, after: ms))
                #expect(indexed == expected[entitlement] ?? [], "\(entitlement) at \(moment)")
            }
            for offer in ["premium", "basic", "pass"] {
                let indexed = Set(try await store.holders(publisher: "demo", offerId: offer, after: ms))
                #expect(indexed == expectedOffers[offer] ?? [], "offer \(offer) at \(moment)")
            }
        }
    }
}
