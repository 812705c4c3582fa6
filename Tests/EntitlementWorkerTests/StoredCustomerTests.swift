import EntitleCore
import Entitlements
import Foundation
import FuzzSupport
import Testing

/// The customer's document as stored (`StoredCustomer`): deflated, every fact kept, so every
/// answer about every moment is the same after it is stored and read back as before; older
/// documents (plain JSON) still read.
@Suite struct StoredCustomerTests {
    let engine: EntitlementEngine
    static let start = Date(timeIntervalSince1970: 1_790_000_000.123)
    static let month: TimeInterval = 30 * 86_400

    init() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appending(path: "Config/catalog.development.json")
        let catalog = try EntitlementCatalog(json: try Data(contentsOf: file))
        engine = EntitlementEngine(publisher: try #require(catalog.publisher("demo")))
    }

    /// A document as the store reads it for this customer.
    static func read(_ stored: String) throws -> CustomerEntitlements {
        try StoredCustomer.decode(stored, publisher: "demo", customer: "reader@example.com")
    }

    /// A transaction as Apple signs one: 16-digit ids, millisecond dates, price and storefront.
    static func fact(
        _ id: Int, original: Int, product: String, kind: ProductKind = .autoRenewable, at date: Date, expires: Date? = nil
    ) -> PurchaseFact {
        PurchaseFact(
            transactionId: String(2_000_000_900_000_000 + id), originalTransactionId: String(2_000_000_900_000_000 + original),
            productId: product, bundleId: "com.entitle.demo", kind: kind, environment: "Production", purchaseDate: date,
            expiresDate: expires, signedDate: date.addingTimeInterval(0.417), price: kind == .consumable ? "0.99" : "9.99",
            currency: "USD", storefront: "USA")
    }

    /// A customer's life through the engine: a monthly subscription renewed `renewals` times
    /// (one renewal refunded, one stretch in billing retry, one upgrade to annual), credits
    /// bought, one refunded, and an issue bought.
    func life(renewals: Int) -> (state: CustomerEntitlements, moments: [Date]) {
        var state = CustomerEntitlements(publisher: "demo", customer: "reader@example.com")
        let monthly = "com.entitle.demo.premium.monthly"
        var moments: [Date] = []
        for n in 0...renewals {
            let from = Self.start.addingTimeInterval(Double(n) * Self.month)
            let to = from.addingTimeInterval(Self.month)
            let renewal = RenewalFact(
                originalTransactionId: String(2_000_000_900_000_000), autoRenew: true, autoRenewProductId: monthly,
                isInBillingRetry: n == renewals / 2, signedDate: from)
            _ = engine.apply(Self.fact(n, original: 0, product: monthly, at: from, expires: to), renewal: renewal, to: &state, now: from)
            moments += [from, to]
        }
        if renewals >= 3 {
            let refunded = Self.start.addingTimeInterval(2.5 * Self.month)
            _ = engine.refund(transactionId: String(2_000_000_900_000_002), at: refunded, in: &state)
            moments.append(refunded)
        }
        let end = Self.start.addingTimeInterval(Double(renewals + 1) * Self.month)
        let annual = Self.fact(
            90_000, original: 0, product: "com.entitle.demo.premium.annual", at: end, expires: end.addingTimeInterval(365 * 86_400))
        _ = engine.apply(annual, to: &state, now: end)
        for n in 0..<3 {
            let at = Self.start.addingTimeInterval(Double(n) * 86_400 + 3_600)
            _ = engine.apply(
                Self.fact(50_000 + n, original: 50_000 + n, product: "com.entitle.demo.credits.100", kind: .consumable, at: at),
                to: &state, now: at)
            moments.append(at)
        }
        _ = engine.refund(transactionId: String(2_000_000_900_050_001), at: Self.start.addingTimeInterval(5 * 86_400), in: &state)
        let issue = Self.start.addingTimeInterval(7 * 86_400)
        _ = engine.apply(
            Self.fact(70_000, original: 70_000, product: "com.entitle.demo.issue.2026.11", kind: .nonConsumable, at: issue),
            to: &state, now: issue)
        moments += [end, end.addingTimeInterval(365 * 86_400), issue, Self.start.addingTimeInterval(5 * 86_400)]
        return (state, moments)
    }

    /// Every moment the history changes at, a millisecond either side, and a day between.
    static func probes(_ state: CustomerEntitlements, _ moments: [Date]) -> [Date] {
        let edges = moments + state.periods.flatMap { [$0.start, $0.end, $0.endedAt, $0.released].compactMap { $0 } }
            + state.credits.entries.map(\.at)
        let first = edges.min() ?? start
        let last = edges.max() ?? start
        let daily = stride(from: first.addingTimeInterval(-86_400), through: last.addingTimeInterval(86_400), by: 86_400).map { $0 }
        return Array(Set(edges.flatMap { [$0.addingTimeInterval(-0.001), $0, $0.addingTimeInterval(0.001)] } + daily)).sorted()
    }

    @Test(arguments: [0, 1, 12, 60])
    func everyAnswerAtEveryMomentIsTheSameAfterStoring(renewals: Int) throws {
        let (state, moments) = life(renewals: renewals)
        let stored = try StoredCustomer.encode(state)
        #expect(stored.hasPrefix("z1:"))
        let read = try Self.read(stored)
        #expect(read == state)
        // The key names the customer: the deflated document does not.
        let inside = String(decoding: try StoredCustomer.json(stored), as: UTF8.self)
        #expect(!inside.contains("reader@example.com") && inside.contains(#""customer":"""#))
        // Documents written before (JSON) read as the same customer.
        let legacy = String(decoding: try JSONEncoder().encode(state), as: UTF8.self)
        #expect(try Self.read(legacy) == state)
        for date in Self.probes(state, moments) {
            #expect(read.entitlements(at: date) == state.entitlements(at: date), "entitlements at \(date)")
            #expect(read.subscriptions(at: date) == state.subscriptions(at: date), "subscriptions at \(date)")
            #expect(read.periods(at: date) == state.periods(at: date), "periods at \(date)")
        }
        #expect(read.credits.balance == state.credits.balance)
    }

    /// What a renewal adds to the stored document is bounded, and far below its JSON.
    @Test func aRenewalAddsLittle() throws {
        let sizes = try [0, 12, 24, 60].map { renewals in
            let (state, _) = life(renewals: renewals)
            return (renewals, json: try JSONEncoder().encode(state).count, stored: try StoredCustomer.encode(state).utf8.count)
        }
        for (renewals, json, stored) in sizes { print("stored customer: \(renewals) renewals: JSON \(json) B, stored \(stored) B") }
        let perRenewal = Double(sizes[3].stored - sizes[1].stored) / 48
        let jsonPerRenewal = Double(sizes[3].json - sizes[1].json) / 48
        print("stored customer: per renewal \(perRenewal) B stored, \(jsonPerRenewal) B as JSON")
        #expect(perRenewal < 80, "a renewal adds \(perRenewal) bytes")
        #expect(Double(sizes[0].stored) < Double(sizes[0].json) * 0.5)
    }

    /// A subscription bought once, as most customers are: what its document costs.
    @Test func aFirstPurchaseIsSmall() throws {
        var state = CustomerEntitlements(publisher: "demo", customer: "reader@example.com")
        let monthly = "com.entitle.demo.premium.monthly"
        _ = engine.apply(
            Self.fact(0, original: 0, product: monthly, at: Self.start, expires: Self.start.addingTimeInterval(Self.month)),
            renewal: RenewalFact(originalTransactionId: String(2_000_000_900_000_000), autoRenew: true, signedDate: Self.start),
            to: &state, now: Self.start)
        let json = try JSONEncoder().encode(state).count
        let stored = try StoredCustomer.encode(state).utf8.count
        print("stored customer: one subscription: JSON \(json) B, stored \(stored) B")
        #expect(stored < 400 && stored * 3 < json)
    }

    /// A stored document that is damaged is an error that says so, never a crash, another
    /// customer or a customer read as empty: zlib's checksums hold or nothing is read.
    @Test func aDamagedDocumentIsRefused() throws {
        let state = life(renewals: 3).state
        let stored = try StoredCustomer.encode(state)
        let bytes = Array(try #require(Data(base64Encoded: String(stored.dropFirst(3)))))
        for damaged in ["z1:not base64!", "z1:" + Data([1, 2, 3]).base64EncodedString(), "z1:", "z2:" + stored.dropFirst(3), "", "["] {
            #expect(throws: (any Error).self, "\(damaged.prefix(20))") { try Self.read(damaged) }
        }
        // Cut short anywhere, or with bytes after its end.
        for length in 0..<bytes.count {
            let cut = "z1:" + Data(bytes[..<length]).base64EncodedString()
            #expect(throws: (any Error).self, "cut at \(length)") { try Self.read(cut) }
        }
        #expect(throws: (any Error).self) { try Self.read("z1:" + Data(bytes + [0]).base64EncodedString()) }
        // Mutated: refused, or (a mutation that changes nothing deflate reads) the same customer.
        var mutator = Mutator(seed: Mutator.seed)
        var refused = 0
        let cases = Mutator.iterations(default: 500)
        for index in 0..<cases {
            let text = "z1:" + Data(mutator.mutate(bytes)).base64EncodedString()
            guard let read = try? Self.read(text) else {
                refused += 1
                continue
            }
            #expect(read == state, "seed \(Mutator.seed), case \(index): a damaged document read as another customer")
        }
        #expect(refused > cases * 9 / 10)
    }

    /// The stored form is fixed: a document written today reads the same in every later
    /// version. A change to the dictionary (which would read old documents as other data) or
    /// to the format fails here; it needs a new marker instead.
    @Test func theFormatIsPinned() throws {
        let digest = SHA256Hex.of(StoredCustomer.dictionaryText)
        #expect(digest == "7ebd26448a36b1bc165c70dd7c02a321a53d82681ca97c81d6e5c2b1edff8700", "the z1 dictionary changed: \(digest)")
        let pinned =
            "z1:WKR/tJrJvZXBCoAgDIbfSHRY6PsY1EE6dfTdkxjZdNIqaNehk1+/zw6+ArCcseCs01oZAJ+rJS2rPS5bzKvnQJErnV5EoI/yGosJBMepMMVV4Y4Kv8BCqTNm9EDOWQfRzJJg3Cw6sS4TB8sgTl4yk+IzrrHHg82E+Psd3LqBC7JyxXXKF2+wactFcvZemuRJzOQnlwni5i6oPBgsujahD1pglhaolHb9RGW8"
        let read = try Self.read(pinned)
        #expect(read.customer == "reader@example.com" && read.transactions.count == 1 && read.periods.count == 1)
        #expect(read.entitlements(at: Self.start.addingTimeInterval(86_400)) == ["hd", "premium"])
        // (Not compared byte for byte when written again: another zlib may deflate the same
        // input to other bytes, which read the same.)
        #expect(try Self.read(try StoredCustomer.encode(read)) == read)
    }

    /// `json` writes plain JSON, for a rolling upgrade from a version that reads only that.
    @Test func theJSONFormatWritesWhatOlderVersionsRead() throws {
        let state = life(renewals: 2).state
        let text = try StoredCustomer.encode(state, format: .json)
        #expect(text.hasPrefix("{"))
        #expect(try JSONDecoder().decode(CustomerEntitlements.self, from: Data(text.utf8)) == state)
        #expect(try Self.read(text) == state)
    }

    /// `ENTITLE_CUSTOMER_FORMAT` picks the form written; anything else is refused at start.
    @Test func theFormatIsChosenByTheEnvironment() async throws {
        #expect(try await AppStoreHostTests.settings([:]).customerFormat == .deflated)
        #expect(try await AppStoreHostTests.settings(["ENTITLE_CUSTOMER_FORMAT": "json"]).customerFormat == .json)
        await #expect(throws: WorkerError.self) { try await AppStoreHostTests.settings(["ENTITLE_CUSTOMER_FORMAT": "gzip"]) }
    }
}
