import Foundation
import FuzzSupport
import RedisTestSupport
import Testing

/// Real requests (a purchase with a signed transaction or an app receipt, Cleeng's payment,
/// Cloud Softphone's form, V1 and V2 notifications, customer tokens) mutated (seeded, see
/// `Mutator`) and sent to the API: no answer is a fault (5xx other than a 503 asking to retry
/// later), none takes over 5 s (and, sent again, over four times that: once can be the loaded
/// machine; Cleeng's payment route: its designed wait for a job in flight, plus 5 s), and the process
/// answers after all of them. A worker runs what is accepted, so odd but valid payloads reach
/// the jobs too. CI runs 1,500; `ENTITLE_FUZZ_ITERATIONS` runs more.
@Suite struct RequestFuzzTests {
    @Test(.timeLimit(.minutes(10))) func mutatedRequestsAreRefusedNeverTrapNorHang() async throws {
        // /v1/validate waits for its job by design; a second here, so a slow job is not a "hang".
        try await APIStack.run(
            "request-fuzz", worker: true,
            catalog: { publishers in
                var access = publishers[0]["api"] as? [String: Any] ?? [:]
                access["validation"] = ["waitSeconds": 1]
                publishers[0]["api"] = access
            }
        ) { api in
            let bought = try await api.buy("premium.monthly")
            let signed = try #require(bought["signedTransaction"] as? String)
            let receipt = try #require(bought["appReceipt"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)
            let v2 = String(decoding: try #require(await api.inbox.wait(for: "/v2", count: 1).first).body, as: UTF8.self)
            let v1 = String(decoding: try #require(await api.inbox.wait(for: "/v1", count: 1).first).body, as: UTF8.self)
            func json(_ object: [String: Any]) throws -> String {
                String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
            }
            let seeds: [(path: String, body: String, type: String, cleeng: Bool)] = [
                (
                    "/v1/purchases", try json(["customer": "ann@example.com", "signedTransaction": signed, "offerId": "premium"]),
                    "application/json", false
                ),
                (
                    "/v1/purchases", try json(["customer": "ann@example.com", "appReceipt": receipt, "transactionId": transactionId]),
                    "application/json", false
                ),
                (
                    "/apple/payment",
                    try json([
                        "customerEmail": "ann@example.com", "offerId": "premium", "appType": "ios",
                        "receipt": ["transactionId": transactionId, "receiptData": receipt],
                    ]), "application/json", true
                ),
                (
                    "/v1/validate",
                    "username=ann%40example.com&receipt=\(receipt.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")&product=com.entitle.demo.premium.monthly",
                    "application/x-www-form-urlencoded", false
                ),
                ("/v1/notifications/apple/demo", v2, "application/json", false),
                ("/v1/notifications/apple/demo", v1, "application/json", false),
                (
                    "/v1/transfers",
                    try json(["originalTransactionId": transactionId, "to": "bob@example.com", "from": "ann@example.com"]),
                    "application/json", false
                ),
            ]
            var random = Mutator(seed: Mutator.seed)
            let iterations = Mutator.iterations(default: 1500)
            var statuses: [Int: Int] = [:]
            var serverErrors: [String] = []
            for index in 0..<iterations {
                await Task.yield()
                let seed = seeds[index % seeds.count]
                let body = random.mutateText(seed.body, splicingWith: seeds[Int(random.next() % UInt64(seeds.count))].body)
                var headers = ["Content-Type": seed.type]
                var token: String? = APIStack.demoToken
                if index % 5 == 0 {
                    // An app key, with a mutated customer token.
                    token = APIStack.appKey
                    // (A header value must be visible ASCII, or the client refuses to send it.)
                    let mutated = random.mutate(Array(customerToken("ann@example.com").utf8)).map { 0x21 + $0 % 0x5E }
                    headers["X-Customer-Token"] = String(decoding: mutated, as: UTF8.self)
                }
                if seed.cleeng {
                    headers["X-Publisher-Token"] = APIStack.demoToken
                    headers["Authorization"] = "Basic " + Data(APIStack.cleengBasic.utf8).base64EncodedString()
                    token = nil
                }
                func send() async throws -> APIStack.Reply {
                    try await api.call(.POST, seed.path, token: token, headers: headers, body: body, timeout: .seconds(30))
                }
                // Cleeng's payment route waits by design for a job about the same transaction
                // still running (up to a third of the API's 30 s maximum wait), then answers.
                let limit: Duration = seed.cleeng ? .seconds(10 + 5) : .seconds(5)
                let started = ContinuousClock.now
                var reply = try await send()
                if ContinuousClock.now - started > limit {
                    // Over the limit once can be the loaded CI machine (its busiest first minute,
                    // with clusters starting beside it, once stalled a plain enqueue for 9 s); a
                    // hang is the input's and happens again, so the repeat gets four times as long.
                    reply = try await withinTimeLimit(
                        "request \(index) of seed \(Mutator.seed) to \(seed.path), sent twice", limit: limit * 4
                    ) { try await send() }
                }
                statuses[reply.status, default: 0] += 1
                // 503 with Retry-After is an answer ("not verified yet, ask again"), not a fault.
                if reply.status >= 500 && !(reply.status == 503 && reply.headers["retry-after"] != nil) {
                    serverErrors.append("request \(index) to \(seed.path): \(reply.status) \(reply.text.prefix(200))")
                }
            }
            #expect(serverErrors.isEmpty, "\(serverErrors.prefix(10).joined(separator: "\n"))")
            #expect(try await api.call(.GET, "/healthz", token: nil).status == 200)
            print("request fuzz: \(iterations) mutated requests (seed \(Mutator.seed)), answers \(statuses.sorted { $0.key < $1.key })")
        }
    }
}
