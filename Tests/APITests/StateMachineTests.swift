import EntitleCore
import Foundation
import RedisTestSupport
import Testing

/// A seeded random walk over everything that happens to purchases (buying, claiming by any
/// road, repeating earlier requests, transfers back and forth, time passing with renewals,
/// auto-renew changes, billing failures and recoveries, upgrades, downgrades, crossgrades,
/// refunds, reversals, family revocations), through the API, the worker and the simulator.
/// After every step every customer's entitlements, credits and subscriptions (now and at a
/// moment in the past) and an access check are compared with `ReferenceModel`.
///
/// CI walks `ENTITLE_STATE_MACHINE_STEPS` (2,000) steps of each seed in
/// `ENTITLE_STATE_MACHINE_SEEDS` (one: 15), about 8 minutes on 2 cores. Longer locally, for
/// example `ENTITLE_STATE_MACHINE_STEPS=10000 ENTITLE_STATE_MACHINE_SEEDS=1,2,3,4` (the seeds
/// run side by side; a failure names its seed and step, and the walk replays from the seed).
@Suite struct StateMachineTests {
    static var steps: Int {
        ProcessInfo.processInfo.environment["ENTITLE_STATE_MACHINE_STEPS"].flatMap { Int($0) }.map { max(1, $0) } ?? 2_000
    }

    static var seeds: [UInt64] {
        let text = ProcessInfo.processInfo.environment["ENTITLE_STATE_MACHINE_SEEDS"] ?? "15"
        let seeds = text.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        return seeds.isEmpty ? [15] : seeds
    }

    /// One walk per seed (seeds run side by side, each on a stack of its own).
    @Test(.timeLimit(.minutes(180)), arguments: StateMachineTests.seeds)
    func aSeededRandomWalkAgreesWithTheReferenceModelAfterEveryStep(seed: UInt64) async throws {
        try await APIStack.run("walk-\(seed)", worker: true, notify: ["demo"]) { api in
            var walk = Walk(api: api, seed: seed)
            try await walk.run(steps: Self.steps)
        }
    }
}

/// SplitMix64: a small generator whose sequence depends on the seed alone.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

struct Walk {
    /// A purchase the walk made: what an app would hold to send it again.
    struct Bought {
        var original: String
        var firstTransaction: String
        var productId: String
        var kind: ReferenceModel.Kind
        var signedTransaction: String
        var appReceipt: String
        var familyShared: Bool
        /// Apple's subscription state, from the last snapshot.
        var autoRenew = true
        var currentProduct: String
    }

    /// A request a customer sent, kept to send it again exactly.
    struct Sent {
        var original: String
        var customer: String
        var road: String
        var body: [String: Any]
        /// For an app's claim: when Apple signed the proof in `body`.
        var signedAt: Date?

        var modelRoad: ReferenceModel.Road { signedAt.map { .app(signedAt: $0) } ?? .backend }
    }

    let api: APIStack
    let seed: UInt64
    var random: SplitMix64
    var model = ReferenceModel()
    var bought: [Bought] = []
    var sent: [Sent] = []
    /// The App Store's now at each step (the clock is frozen between steps).
    var moments: [Date] = []
    var now = Date()
    var log: [String] = []
    var checks = 0
    /// The purchase whose Apple state the step changed (time frozen, nothing else changes).
    var touched: String?
    /// How apps' claims ended, by road and outcome (the walk reports that it tried each).
    var appClaims: [String: Int] = [:]
    /// Preflights compared with the store, and those taken again because another job ran.
    var preflightsCompared = 0
    var preflightsRetaken = 0

    static let customers = ["ann@example.com", "bob@example.com", "carol@example.com", "dave@example.com"]
    static let maximumPurchases = 40
    static let shopping: [(product: String, familyShareable: Bool)] = [
        ("credits.100", false), ("issue.2026.11", false), ("issue.2026.12", false), ("pass.30days", false), ("premium.monthly", true),
        ("premium.annual", true), ("basic.monthly", false),
    ]

    init(api: APIStack, seed: UInt64) {
        self.api = api
        self.seed = seed
        self.random = SplitMix64(seed: seed)
    }

    mutating func pick<T>(_ items: [T]) -> T? {
        items.isEmpty ? nil : items[Int(random.next() % UInt64(items.count))]
    }

    mutating func chance(_ percent: UInt64) -> Bool { random.next() % 100 < percent }

    // MARK: The walk

    mutating func run(steps: Int) async throws {
        try await api.simulator("/simulator/clock/freeze", #"{"frozen":true}"#)
        let clock = ContinuousClock()
        var bySort: [String: (count: Int, time: Duration)] = [:]
        var spent: [Duration] = [.zero, .zero, .zero, .zero]
        for step in 1...steps {
            var mark = clock.now
            func lap(_ phase: Int) {
                spent[phase] += clock.now - mark
                mark = clock.now
            }
            now = try await advanceClock(by: 60)
            moments.append(now)
            touched = nil
            let action = try await act()
            log.append("\(step): \(action)")
            if log.count > 40 { log.removeFirst() }
            lap(0)
            let settling = clock.now
            try await api.settle(timeout: .seconds(120))
            bySort[Self.sort(of: action), default: (0, .zero)].count += 1
            bySort[Self.sort(of: action), default: (0, .zero)].time += clock.now - settling
            lap(1)
            try await refreshApple(afterTimePassed: action.hasPrefix("advance"))
            now = try await advanceClock(by: 1)
            lap(2)
            guard try await check(step: step) else { return }
            lap(3)
        }
        let phases = zip(["acting", "settling", "reading Apple", "checking"], spent).map { "\($0) \($1)" }.joined(separator: ", ")
        print("state machine: seed \(seed), \(steps) steps, \(bought.count) purchases, \(checks) answers compared (\(phases))")
        print("  apps' claims: " + appClaims.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        #expect(
            appClaims["appStaleJWS refused", default: 0] > 0 && appClaims["appFreshJWS transfer", default: 0] > 0 || steps < 500,
            "the walk tried both a stale claim refused and a fresh one that moved a purchase")
        print("  preflights compared with the store: \(preflightsCompared) (taken again as another job ran: \(preflightsRetaken))")
        #expect(preflightsCompared > 0 || steps < 500, "the walk compared the store around some preflights")
        print(
            "  settling per kind of step: "
                + bySort.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.count)x \($0.value.time / max(1, $0.value.count))" }.joined(
                    separator: ", "))
    }

    mutating func act() async throws -> String {
        let roll = random.next() % 100
        switch roll {
        case 0..<18 where bought.count < Self.maximumPurchases: return try await buy()
        case 0..<38: return try await claim()
        case 38..<46: return try await repeatRequest()
        case 46..<54: return try await transfer()
        case 54..<69: return try await passTime()
        case 69..<84: return try await changeSubscription()
        case 84..<92: return try await refund()
        case 92..<97: return try await reverseRefund()
        default: return try await revokeFamily()
        }
    }

    mutating func buy() async throws -> String {
        guard let (product, shareable) = pick(Self.shopping), let customer = pick(Self.customers) else { return "nothing" }
        let family = shareable && chance(25)
        var extra: [String: Any] = ["environment": "Production"]
        if family { extra["familyShared"] = true }
        let result = try await api.buy(product, account: "walk-\(seed)-\(bought.count)", extra: extra)
        let productId = "com.entitle.demo.\(product)"
        let kind = try #require(ReferenceModel.products[productId]).kind
        let item = Bought(
            original: try #require(result["originalTransactionId"] as? String),
            firstTransaction: try #require(result["transactionId"] as? String),
            productId: productId, kind: kind, signedTransaction: try #require(result["signedTransaction"] as? String),
            appReceipt: try #require(result["appReceipt"] as? String), familyShared: family, currentProduct: productId)
        bought.append(item)
        model.purchases[item.original] = ReferenceModel.Purchase(original: item.original, productId: productId, kind: kind)
        try await refresh(item.original)
        try await send(item, by: customer)
        return "\(customer) buys \(product)\(family ? " (family)" : "") as \(item.original)"
    }

    mutating func claim() async throws -> String {
        guard let item = pick(bought), let customer = pick(Self.customers) else { return "nothing" }
        let road = try await send(item, by: customer)
        return "\(customer) claims \(item.original) by \(road)"
    }

    /// Sends one claim by a road the purchase allows; the model learns it.
    @discardableResult
    mutating func send(_ item: Bought, by customer: String) async throws -> String {
        let offer = try #require(ReferenceModel.products[item.productId]).offer
        // Cloud Softphone's validate names the product: only for purchases whose product never
        // changes (a subscription's newest transaction may be of another product, and is refused).
        // An app's claims (its key and the customer's token): with the JWS bought long ago, or
        // with the current one StoreKit would hand over after a sync (signed now).
        let roads =
            ["signedTransaction", "transactionId", "appReceipt", "cleeng", "appStaleJWS", "appFreshJWS"]
            + (item.kind == .autoRenewable ? [] : ["validate"])
        let road = pick(roads) ?? "transactionId"
        var body: [String: Any]
        var signedAt: Date?
        switch road {
        case "appStaleJWS":
            body = ["signedTransaction": item.signedTransaction]
            signedAt = try Self.signedDate(item.signedTransaction)
        case "appFreshJWS":
            let current = try await api.simulator("/simulator/transactions/\(item.firstTransaction)")
            let jws = try #require(current["signedTransaction"] as? String)
            body = ["signedTransaction": jws]
            signedAt = try Self.signedDate(jws)
        case "signedTransaction": body = ["customer": customer, "signedTransaction": item.signedTransaction]
        case "transactionId": body = ["customer": customer, "transactionId": item.firstTransaction]
        case "appReceipt": body = ["customer": customer, "appReceipt": item.appReceipt, "transactionId": item.firstTransaction]
        case "cleeng":
            body = [
                "customerEmail": customer, "offerId": offer, "appType": "ios",
                "receipt": ["transactionId": item.firstTransaction, "receiptData": item.appReceipt],
            ]
        default: body = ["username": customer, "receipt": item.appReceipt, "product": item.productId]
        }
        let request = Sent(original: item.original, customer: customer, road: road, body: body, signedAt: signedAt)
        try await deliver(request)
        sent.append(request)
        model.claim(item.original, by: customer, road: request.modelRoad, at: now)
        return road
    }

    /// Sends a claim. An app's claim is sometimes first asked as a preflight
    /// (`?dryRun=true`), whose answer must be the model's and which must change nothing.
    mutating func deliver(_ request: Sent) async throws {
        switch request.road {
        case "appStaleJWS", "appFreshJWS":
            let headers = ["X-Customer-Token": customerToken(request.customer)]
            let expected = model.outcome(of: request.original, by: request.customer, road: request.modelRoad, at: now)
            if chance(30) {
                try await preflight(request, headers: headers, expected: expected)
            }
            let reply = try await api.call(
                .POST, "/v1/purchases", token: APIStack.appKey, headers: headers, json: request.body, route: "POST /v1/purchases")
            try #require(reply.status == 202, "an app's claim answered \(reply.status): \(reply.text)")
            let id = try #require(reply.json["jobId"] as? String)
            let result = try await api.result(id, token: APIStack.appKey, headers: headers)
            let claim = result["claim"] as? [String: Any] ?? [:]
            #expect(
                claim["outcome"] as? String == expected.rawValue,
                "seed \(seed): \(request.customer)'s \(request.road) claim on \(request.original): \(result)")
            appClaims["\(request.road) \(expected.rawValue)", default: 0] += 1
            if expected == .refused {
                #expect(
                    ["staleProofOfPurchase", "ownedByAnotherCustomer"].contains(result["reason"] as? String ?? ""),
                    "seed \(seed): a refused claim says why: \(result)")
            }
        default:
            try await deliver(road: request.road, body: request.body)
        }
    }

    /// Asks the claim as a preflight (`?dryRun=true`): its answer must be the model's, and the
    /// store must read the same after it. The worker's own timers (a deferred or retried job
    /// coming back) may run a job in the same moment, which takes a lock and so
    /// moves a fence: a reading is compared only when the preflight's was the one job that
    /// ended in it and none is running, and is taken again (at most five times) otherwise.
    mutating func preflight(_ request: Sent, headers: [String: String], expected: ReferenceModel.ClaimOutcome) async throws {
        for _ in 0..<5 {
            // What the step set off first (a purchase's own notifications), so that only the
            // preflight runs between the two readings.
            try await api.settle(timeout: .seconds(120))
            let ended = try await endedJobs()
            let before = try await api.keys().filter { $0.key.contains(":ent:") && !$0.key.contains(":lock:") }
            let reply = try await api.call(
                .POST, "/v1/purchases?dryRun=true", token: APIStack.appKey, headers: headers, json: request.body,
                route: "POST /v1/purchases")
            try #require(reply.status == 200, "the preflight answered \(reply.status): \(reply.text)")
            let result = reply.json["result"] as? [String: Any] ?? [:]
            let claim = result["claim"] as? [String: Any] ?? [:]
            #expect(
                claim["outcome"] as? String == expected.rawValue,
                "seed \(seed): the preflight of \(request.customer)'s \(request.road) claim on \(request.original): \(result)")
            let after = try await api.keys().filter { $0.key.contains(":ent:") && !$0.key.contains(":lock:") }
            let stats = try await api.jobQueue.stats(queue: "default")
            guard try await endedJobs() == ended + 1, stats.active == 0, stats.pending == 0 else {
                preflightsRetaken += 1
                continue
            }
            let changed = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] }.sorted()
            #expect(
                changed.isEmpty,
                "seed \(seed): a preflight wrote to the store: \(changed.map { "\($0) \(before[$0] ?? 0) -> \(after[$0] ?? 0)" })")
            preflightsCompared += 1
            return
        }
    }

    /// How many jobs of the default queue have ended a run (succeeded, retried, deferred or dead) so far.
    func endedJobs() async throws -> Int {
        let counters = try await api.jobQueue.stats(queue: "default").counters
        let ends = ["succeeded:", "retried:", "deferred:", "dead:"]
        return counters.filter { counter in ends.contains { counter.key.hasPrefix($0) } }.values.reduce(0, +)
    }

    func deliver(road: String, body: [String: Any]) async throws {
        switch road {
        case "cleeng":
            let reply = try await api.call(
                .POST, "/apple/payment", token: nil, headers: CompatibilityRouteTests.cleengHeaders, json: body,
                route: "POST /apple/payment")
            try #require(reply.status == 200, "\(reply.text)")
        case "validate":
            let reply = try await api.call(
                .POST, "/v1/validate", headers: ["Accept": "application/json"], json: body, route: "POST /v1/validate")
            try #require([200, 403, 503].contains(reply.status), "\(reply.text)")
        default:
            _ = try await api.submit(body)
        }
    }

    mutating func repeatRequest() async throws -> String {
        guard let earlier = pick(sent) else { return "nothing" }
        try await deliver(earlier)
        model.claim(earlier.original, by: earlier.customer, road: earlier.modelRoad, at: now)
        return "\(earlier.customer) repeats a \(earlier.road) request for \(earlier.original)"
    }

    mutating func transfer() async throws -> String {
        guard let item = pick(bought.filter { $0.kind != .consumable }), let to = pick(Self.customers),
            let from = model.owner(item.original), from != to
        else { return "nothing" }
        let reply = try await api.call(
            .POST, "/v1/transfers", json: ["originalTransactionId": item.original, "to": to, "from": from], route: "POST /v1/transfers")
        try #require(reply.status == 202, "\(reply.text)")
        model.transfer(item.original, to: to, at: now)
        return "the publisher moves \(item.original) from \(from) to \(to)"
    }

    mutating func passTime() async throws -> String {
        // At most 10 days at once: a grace period (16 days) is always seen while it lasts.
        let short = chance(50)
        let extra: UInt64 = random.next() % (short ? 2 * 86_400 : 7 * 86_400)
        let seconds = Double((short ? 3_600 : 3 * 86_400) + extra)
        now = try await advanceClock(by: seconds)
        return "advance \(Int(seconds)) s"
    }

    mutating func changeSubscription() async throws -> String {
        let live = bought.indices.filter {
            bought[$0].kind == .autoRenewable && [1, 3, 4].contains(model.purchases[bought[$0].original]?.appleStatus ?? 0)
        }
        guard let index = pick(live), let change = pick(["auto-renew", "billing-failure", "billing-recovery", "grade"]) else {
            return "nothing"
        }
        let item = bought[index]
        touched = item.original
        let path = "/simulator/subscriptions/\(item.original)"
        switch change {
        case "auto-renew":
            try await api.simulator(path + (item.autoRenew ? "/auto-renew-off" : "/auto-renew-on"), "{}")
            return "\(item.original) auto-renew \(item.autoRenew ? "off" : "on")"
        case "billing-failure":
            try await api.simulator(path + "/billing-failure", "{}")
            return "\(item.original) billing starts failing"
        case "billing-recovery":
            try await api.simulator(path + "/billing-recovery", "{}")
            return "\(item.original) billing recovers"
        default:
            guard model.purchases[item.original]?.appleStatus != 3 else { return "nothing (in billing retry)" }
            let (kind, target): (String, String) =
                switch item.currentProduct {
                case "com.entitle.demo.basic.monthly": ("upgrade", "com.entitle.demo.premium.monthly")
                case "com.entitle.demo.premium.monthly":
                    chance(50) ? ("downgrade", "com.entitle.demo.basic.monthly") : ("crossgrade", "com.entitle.demo.premium.annual")
                default: chance(50) ? ("downgrade", "com.entitle.demo.basic.monthly") : ("crossgrade", "com.entitle.demo.premium.monthly")
                }
            try await api.simulator(path + "/" + kind, #"{"productId":"\#(target)"}"#)
            return "\(item.original) \(kind) to \(target)"
        }
    }

    mutating func refund() async throws -> String {
        let open = model.transactions.values.filter { $0.revoked == nil }.map(\.id).sorted()
        guard let id = pick(open) else { return "nothing" }
        try await api.simulator("/simulator/transactions/\(id)/refund", "{}")
        try await follow(id)
        return "Apple refunds \(id)"
    }

    mutating func reverseRefund() async throws -> String {
        let family = Set(bought.filter(\.familyShared).map(\.original))
        let refunded = model.transactions.values.filter { $0.revoked != nil && !family.contains($0.original) }.map(\.id).sorted()
        guard let id = pick(refunded) else { return "nothing" }
        try await api.simulator("/simulator/transactions/\(id)/refund-reversed", "{}")
        try await follow(id)
        return "Apple reverses the refund of \(id)"
    }

    mutating func revokeFamily() async throws -> String {
        let family = Set(bought.filter(\.familyShared).map(\.original))
        let revocable = model.transactions.values.filter { $0.revoked == nil && family.contains($0.original) }.map(\.id).sorted()
        guard let id = pick(revocable) else { return "nothing" }
        try await api.simulator("/simulator/transactions/\(id)/revoke", "{}")
        try await follow(id)
        return "family sharing of \(id) revoked"
    }

    /// A transaction's refund state changed at Apple: the model reads it, and credits follow.
    mutating func follow(_ id: String) async throws {
        let wasRevoked = model.transactions[id]?.revoked != nil
        let transaction = try await fetchTransaction(id)
        model.transactions[id] = transaction
        touched = transaction.original
        // A refund during a grace period ends the subscription there; a reversal does not bring the grace back.
        if let revoked = transaction.revoked, let expires = transaction.expires,
            let grace = model.purchases[transaction.original]?.graceEnds[id],
            revoked < grace
        {
            model.purchases[transaction.original]?.graceEnds[id] = max(expires, revoked)
        }
        model.creditsFollow(id, wasRevoked: wasRevoked, at: now)
    }

    // MARK: Apple's side, read back

    mutating func advanceClock(by seconds: Double) async throws -> Date {
        let clock = try await api.simulator("/simulator/clock/advance", #"{"seconds":\#(seconds)}"#)
        return Date(timeIntervalSince1970: try #require(clock["now"] as? Double) / 1000)
    }

    /// Reads subscriptions back from the simulator: after time passed, every one that may
    /// still renew, fail or end; otherwise the one the step touched (the clock is frozen).
    mutating func refreshApple(afterTimePassed: Bool) async throws {
        for item in bought where item.kind == .autoRenewable {
            let status = model.purchases[item.original]?.appleStatus ?? 1
            // Every step moves the clock a minute: a period that ended meanwhile renewed or lapsed.
            let latest = model.purchases[item.original]?.transactions.last.flatMap { model.transactions[$0] }
            let lapsed = [1, 3, 4].contains(status) && (latest?.expires.map { $0 <= now.addingTimeInterval(120) } ?? false)
            if (afterTimePassed && [1, 3, 4].contains(status)) || item.original == touched || lapsed { try await refresh(item.original) }
        }
    }

    mutating func refresh(_ original: String) async throws {
        guard var purchase = model.purchases[original], let index = bought.firstIndex(where: { $0.original == original }) else { return }
        guard purchase.kind == .autoRenewable else {
            if purchase.transactions.isEmpty {
                purchase.transactions = [original]
                model.transactions[original] = try await fetchTransaction(original)
            }
            model.purchases[original] = purchase
            return
        }
        let snapshot = try await api.simulator("/simulator/subscriptions/\(original)")
        let ids = try #require(snapshot["transactionIds"] as? [String])
        for id in ids where model.transactions[id] == nil { model.transactions[id] = try await fetchTransaction(id) }
        purchase.transactions = ids
        purchase.appleStatus = snapshot["status"] as? Int ?? 1
        if purchase.appleStatus == 4, let latest = ids.last, let grace = snapshot["gracePeriodExpiresDate"] as? Double {
            purchase.graceEnds[latest] = Date(timeIntervalSince1970: grace / 1000)
        }
        model.purchases[original] = purchase
        bought[index].autoRenew = snapshot["autoRenewStatus"] as? Bool ?? bought[index].autoRenew
        bought[index].currentProduct = snapshot["productId"] as? String ?? bought[index].currentProduct
    }

    func fetchTransaction(_ id: String) async throws -> ReferenceModel.Transaction {
        let snapshot = try await api.simulator("/simulator/transactions/\(id)")
        let jws = try #require(snapshot["signedTransaction"] as? String)
        let payload = try #require(Self.payload(jws))
        func date(_ key: String) -> Date? { (payload[key] as? Double).map { Date(timeIntervalSince1970: $0 / 1000) } }
        return ReferenceModel.Transaction(
            id: id, original: payload["originalTransactionId"] as? String ?? id, productId: payload["productId"] as? String ?? "",
            purchase: try #require(date("purchaseDate")), expires: date("expiresDate"), revoked: date("revocationDate"))
    }

    /// When Apple (the simulator) signed a JWS.
    static func signedDate(_ jws: String) throws -> Date {
        let signed = try #require(payload(jws)?["signedDate"] as? Double, "a signed transaction has a signedDate")
        return Date(timeIntervalSince1970: signed / 1000)
    }

    /// The JSON inside a JWS, read without verifying (the test only reads what it asked for).
    static func payload(_ jws: String) -> [String: Any]? {
        let parts = jws.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
    }

    /// What kind of step a log line describes (for the time report).
    static func sort(of action: String) -> String {
        for word in ["buys", "claims", "repeats", "moves", "advance", "auto-renew", "billing", "grade", "refunds", "reverses", "revoked"]
        where action.contains(word) { return word }
        return "other"
    }

    // MARK: Checking

    /// Every customer now, one customer at a moment of the past, and one access check.
    mutating func check(step: Int) async throws -> Bool {
        var problems: [String] = []
        for customer in Self.customers {
            problems += try await compare(customer, at: nil)
        }
        if moments.count > 1, let moment = pick(Array(moments.dropLast())), let customer = pick(Self.customers) {
            // Half a minute after a step: never at the instant of one.
            problems += try await compare(customer, at: moment.addingTimeInterval(30.5))
        }
        if let customer = pick(Self.customers), let offer = pick(["issue-2026-11", "issue-2026-12", "pass-30", "premium", "basic"]) {
            let granted = try await api.access(customer, offer)
            let expected = model.access(of: customer, offer: offer, at: now)
            checks += 1
            if granted != expected { problems.append("access of \(customer) to \(offer): \(granted), expected \(expected)") }
        }
        guard problems.isEmpty else {
            Issue.record(
                """
                seed \(seed), step \(step): the answers differ from the reference model
                \(problems.joined(separator: "\n"))
                what each side knows:
                \(try await diagnosis(problems))
                last steps:
                \(log.joined(separator: "\n"))
                """)
            return false
        }
        return true
    }

    /// For a failure: the model's view and Entitle's stored document of each purchase of the
    /// customers named in the problems.
    func diagnosis(_ problems: [String]) async throws -> String {
        let store = EntitlementStore(redis: api.jobQueue.redis, prefix: api.jobQueue.configuration.prefix, logger: TestRedis.logger)
        func time(_ date: Date?) -> String { date.map { String(format: "%.3f", $0.timeIntervalSince1970) } ?? "-" }
        var lines: [String] = []
        // A problem names its customer first ("ann@example.com now: ...") or after "access of".
        for customer in Self.customers where problems.contains(where: { $0.contains(customer) }) {
            let state = try await store.load(publisher: "demo", customer: customer).state
            for original in Set(state.periods.map(\.originalTransactionId)).sorted() {
                lines.append(
                    "\(customer), \(original): stints \((model.stints[original] ?? []).map { "\($0.customer.prefix(5)) \(time($0.from))-\(time($0.to))" })"
                )
                if let purchase = model.purchases[original] {
                    lines.append("  Apple: status \(purchase.appleStatus), grace \(purchase.graceEnds.mapValues { time($0) })")
                    for id in purchase.transactions {
                        if let t = model.transactions[id] {
                            lines.append(
                                "  \(id) \(t.productId.split(separator: ".").suffix(2).joined(separator: ".")) \(time(t.purchase))-\(time(t.expires)) revoked \(time(t.revoked))"
                            )
                        }
                    }
                }
                for period in state.periods where period.originalTransactionId == original {
                    lines.append(
                        "  period \(period.transactionId) \(time(period.start))-\(time(period.end)) ended \(time(period.endedAt)) \(period.endReason?.rawValue ?? "") released \(time(period.releasedAt))"
                    )
                }
                if let record = state.subscriptions[original] {
                    lines.append(
                        "  record latest \(record.latestTransactionId) billingRetry \(record.isInBillingRetry.map(String.init) ?? "-") grace \(time(record.gracePeriodExpiresDate))"
                    )
                }
            }
        }
        return lines.joined(separator: "\n")
    }

    mutating func compare(_ customer: String, at moment: Date?) async throws -> [String] {
        let document = try await api.customer(customer, at: moment)
        checks += 1
        let at = moment ?? (document["at"] as? Double).map { Date(timeIntervalSince1970: $0 / 1000) } ?? now
        let label = moment.map { "\(customer) at \($0.timeIntervalSince1970)" } ?? "\(customer) now"
        let entitlements = Set(document["entitlements"] as? [String] ?? [])
        let balance = (document["credits"] as? [String: Any])?["balance"] as? Int ?? 0
        var subscriptions: [String: String] = [:]
        for item in document["subscriptions"] as? [[String: Any]] ?? [] {
            if let id = item["originalTransactionId"] as? String { subscriptions[id] = item["status"] as? String ?? "?" }
        }
        var problems: [String] = []
        let expectedEntitlements = model.entitlements(of: customer, at: at)
        if entitlements != expectedEntitlements {
            problems.append("\(label): entitlements \(entitlements.sorted()), expected \(expectedEntitlements.sorted())")
        }
        let expectedBalance = model.balance(of: customer, at: at)
        if balance != expectedBalance { problems.append("\(label): credits \(balance), expected \(expectedBalance)") }
        let expectedSubscriptions = model.subscriptions(of: customer, at: at)
        if subscriptions != expectedSubscriptions {
            problems.append(
                "\(label): subscriptions \(subscriptions.sorted { $0.key < $1.key }), expected \(expectedSubscriptions.sorted { $0.key < $1.key })"
            )
        }
        return problems
    }
}
