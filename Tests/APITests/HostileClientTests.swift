import Foundation
import NIOHTTP1
import RedisTestSupport
import Testing

/// The API attacked as a hostile client would: every route with every credential such a
/// client may hold (expected answers in `hostile-client.tsv`), then malformed input on every
/// route and parameter. After each batch the process still answers, no answer was a 5xx,
/// and Redis holds exactly what it held before.
@Suite struct HostileClientTests {
    static let table = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appending(path: "hostile-client.tsv")

    /// A request for a route, filled in with this run's data.
    struct Probe: Sendable {
        var method: String
        var path: String
        var body: String?
        var contentType = "application/json"
        /// Cleeng's route takes its key in X-Publisher-Token with Basic credentials.
        var cleeng = false
    }

    @Test(.timeLimit(.minutes(5))) func everyRouteAnswersEveryCredentialAsTheTableSaysAndMalformedInputIsRefused() async throws {
        // No worker runs the jobs: a route that waits for one (Cleeng's payment route, behind
        // a job of the same purchase; a long-poll) waits its whole time, so that time is short.
        try await APIStack.run("hostile", worker: false, configure: { $0.maxWait = .seconds(3) }) { api in
            // What the requests are about: a real purchase, a real job of demo's.
            let bought = try await api.buy("credits.100")
            let signed = try #require(bought["signedTransaction"] as? String)
            let receipt = try #require(bought["appReceipt"] as? String)
            let transactionId = try #require(bought["transactionId"] as? String)
            let job = try #require(
                try await api.call(.POST, "/v1/purchases", json: ["customer": "ann@example.com", "transactionId": transactionId]).json[
                    "jobId"]
                    as? String)
            let probes = try Self.probes(signed: signed, receipt: receipt, transactionId: transactionId, job: job)
            // A route's variants (`POST /v1/purchases?dryRun=true`) have rows of their own.
            #expect(
                Set(probes.keys.map { String($0.split(separator: "?")[0]) }) == Set(api.routes),
                "the suite attacks every route the API serves")

            var tried = 0
            var accepted = 0
            var serverErrors: [String] = []

            // 1. Credentials, as the table says.
            let rows = try String(contentsOf: Self.table, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("#") }
            let kinds = rows[0].split(separator: "\t").dropFirst().map(String.init)
            #expect(kinds == ["none", "wrong", "otherTenant", "appKey", "appKeyOther", "expiredToken"])
            let before = try await api.keys()
            var mismatches: [String] = []
            for row in rows.dropFirst() {
                let cells = row.split(separator: "\t").map(String.init)
                let route = cells[0]
                let probe = try #require(probes[route], "the table names \(route), which the API does not serve")
                for (kind, expected) in zip(kinds, cells.dropFirst()) {
                    let reply = try await Self.send(probe, credential: kind, to: api)
                    tried += 1
                    if reply.status >= 500 { serverErrors.append("\(route) \(kind): \(reply.status)") }
                    if String(reply.status) != expected {
                        mismatches.append("\(route) as \(kind): \(reply.status), table says \(expected): \(reply.text.prefix(160))")
                    }
                    if route == "GET /v1/customers/{id}/access/{offerId}" && kind == "otherTenant" {
                        #expect(reply.json["accessGranted"] as? Bool == false, "another publisher learns nothing of demo's customer")
                    }
                }
            }
            #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
            #expect(try await api.keys() == before, "no credential in the table wrote anything")
            #expect(try await api.call(.GET, "/healthz", token: nil).status == 200)

            // 2. Malformed input on every route and parameter, with demo's secret key (the most a
            // client can do), then with an app key and a good customer token.
            for credential in ["secret", "appKeyAnn"] {
                // A variant's malformed bodies are its route's.
                for (route, probe) in probes.sorted(by: { $0.key < $1.key }) where !route.contains("?") {
                    let batchBefore = try await api.keys()
                    var batchAccepted = 0
                    for variant in Self.malformed(probe) {
                        await Task.yield()
                        let reply = try await Self.send(variant, credential: credential, to: api)
                        tried += 1
                        if reply.status >= 500 {
                            serverErrors.append("\(route) \(variant.path.prefix(80)) \(variant.body?.prefix(60) ?? ""): \(reply.status)")
                        }
                        // Some odd input is still valid (an emoji in an email's local part): it may write.
                        if (200..<300).contains(reply.status) && probe.method != "GET" { batchAccepted += 1 }
                    }
                    accepted += batchAccepted
                    if batchAccepted == 0 { #expect(try await api.keys() == batchBefore, "refused input to \(route) wrote nothing") }
                    #expect(try await api.call(.GET, "/healthz", token: nil).status == 200, "alive after \(route)")
                }
            }
            #expect(serverErrors.isEmpty, "\(serverErrors.prefix(20).joined(separator: "\n"))")
            print(
                "hostile client: \(tried) requests, \(accepted) odd but valid ones accepted, \(serverErrors.count) server errors, 0 crashes (the process answered after every batch)"
            )
            #expect(tried > 1500)
        }
    }

    /// One request per route, about ann and demo.
    static func probes(signed: String, receipt: String, transactionId: String, job: String) throws -> [String: Probe] {
        func json(_ object: [String: Any]) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
        }
        let validate = "username=ann&receipt=not%20base64!&product=com.entitle.demo.credits.100"
        return [
            "POST /v1/purchases": Probe(
                method: "POST", path: "/v1/purchases", body: try json(["customer": "ann@example.com", "signedTransaction": signed])),
            "POST /v1/purchases?dryRun=true": Probe(
                method: "POST", path: "/v1/purchases?dryRun=true",
                body: try json(["customer": "ann@example.com", "signedTransaction": signed])),
            "POST /apple/payment": Probe(
                method: "POST", path: "/apple/payment",
                body: try json([
                    "customerEmail": "ann@example.com", "offerId": "credits-100", "appType": "ios",
                    "receipt": ["transactionId": transactionId, "receiptData": receipt],
                ]), cleeng: true),
            "GET /cleeng/entitlements/{customerEmail}/{offerId}": Probe(
                method: "GET", path: "/cleeng/entitlements/ann%40example.com/premium", cleeng: true),
            "GET /cleeng/entitlements/{customerEmail}": Probe(method: "GET", path: "/cleeng/entitlements/ann%40example.com", cleeng: true),
            "GET /cleeng/accessible-tags/{customerEmail}": Probe(
                method: "GET", path: "/cleeng/accessible-tags/ann%40example.com", cleeng: true),
            "GET /v1/validate": Probe(method: "GET", path: "/v1/validate?" + validate),
            "POST /v1/validate": Probe(
                method: "POST", path: "/v1/validate", body: validate, contentType: "application/x-www-form-urlencoded"),
            "GET /v1/jobs/{id}": Probe(method: "GET", path: "/v1/jobs/\(job)"),
            "GET /v1/customers/{id}/entitlements": Probe(method: "GET", path: "/v1/customers/ann%40example.com/entitlements"),
            "GET /v1/customers/{id}/access/{offerId}": Probe(method: "GET", path: "/v1/customers/ann%40example.com/access/premium"),
            "GET /v1/customers/{id}/events": Probe(method: "GET", path: "/v1/customers/ann%40example.com/events?limit=5"),
            "GET /v1/reports/{metric}": Probe(method: "GET", path: "/v1/reports/mrr?publisher=demo&by=week"),
            "GET /v1/admin/publishers/{publisherId}/customers/{id}/events": Probe(
                method: "GET", path: "/v1/admin/publishers/demo/customers/ann%40example.com/events"),
            "GET /v1/admin/queues/history": Probe(method: "GET", path: "/v1/admin/queues/history"),
            "POST /v1/notifications/apple/{publisherId}": Probe(
                method: "POST", path: "/v1/notifications/apple/demo", body: try json(["signedPayload": forged(signed)])),
            "POST /v1/transfers": Probe(
                method: "POST", path: "/v1/transfers",
                body: try json(["originalTransactionId": transactionId, "to": "bob smith@example.com"])),
            "POST /v1/customers/{id}/credits/spend": Probe(
                method: "POST", path: "/v1/customers/ann%40example.com/credits/spend", body: try json(["amount": 0, "reference": "r1"])),
            "PUT /v1/customers/{id}/consumption-consent": Probe(
                method: "PUT", path: "/v1/customers/ann%40example.com/consumption-consent", body: try json(["consented": "yes"])),
            "GET /v1/customers/{id}/consumption-consent": Probe(method: "GET", path: "/v1/customers/ann%40example.com/consumption-consent"),
            "POST /v1/customers/{id}/resync": Probe(method: "POST", path: "/v1/customers/ann%40example.com/resync"),
            "POST /v1/customers/{id}/devices": Probe(
                method: "POST", path: "/v1/customers/ann%40example.com/devices",
                body: try json(["token": "not hex", "bundleId": "com.entitle.demo"])),
            "GET /v1/customers/{id}/devices": Probe(method: "GET", path: "/v1/customers/ann%40example.com/devices"),
            "DELETE /v1/customers/{id}/devices/{token}": Probe(method: "DELETE", path: "/v1/customers/ann%40example.com/devices/xyz"),
            "POST /v1/pushes": Probe(
                method: "POST", path: "/v1/pushes",
                body: try json([
                    "bundleId": "com.entitle.demo", "audience": ["entitlement": "premium"], "payload": ["aps": ["alert": 5, "sound": []]],
                    "pushType": "background",
                ])),
            "GET /v1/pushes/{id}": Probe(method: "GET", path: "/v1/pushes/0123456789abcdef0123456789abcdef"),
            "POST /v1/imports": Probe(method: "POST", path: "/v1/imports", body: "customer,proof\nnot an email,12"),
            "GET /v1/imports/{id}": Probe(method: "GET", path: "/v1/imports/0123456789abcdef01234567"),
            "PUT /v1/purchases/{originalTransactionId}/appAccountToken": Probe(
                method: "PUT", path: "/v1/purchases/\(transactionId)/appAccountToken", body: try json(["appAccountToken": "not a uuid"])),
            "GET /v1/queues": Probe(method: "GET", path: "/v1/queues"),
            "GET /metrics": Probe(method: "GET", path: "/metrics"),
            "GET /healthz": Probe(method: "GET", path: "/healthz"),
            "GET /readyz": Probe(method: "GET", path: "/readyz"),
            "GET /v1/admin/queues/{queue}/recent": Probe(method: "GET", path: "/v1/admin/queues/default/recent?limit=5"),
            "GET /v1/admin/queues/{queue}/dead": Probe(method: "GET", path: "/v1/admin/queues/default/dead"),
            "POST /v1/admin/queues/{queue}/dead/retry": Probe(method: "POST", path: "/v1/admin/queues/default/dead/retry", body: "{}"),
            "POST /v1/admin/queues/{queue}/dead/purge": Probe(method: "POST", path: "/v1/admin/queues/default/dead/purge", body: "{}"),
            "GET /v1/admin/publishers/{publisherId}/customers/{id}": Probe(
                method: "GET", path: "/v1/admin/publishers/demo/customers/ann%40example.com"),
            "GET /dashboard": Probe(method: "GET", path: "/dashboard"),
            "GET /dashboard/app.css": Probe(method: "GET", path: "/dashboard/app.css"),
            "GET /dashboard/app.js": Probe(method: "GET", path: "/dashboard/app.js"),
        ]
    }

    /// Sends `probe` as the holder of `credential`.
    static func send(_ probe: Probe, credential: String, to api: APIStack) async throws -> APIStack.Reply {
        var headers = ["Content-Type": probe.contentType]
        var token: String?
        switch credential {
        case "none": break
        case "wrong": token = "not-a-key-of-anyone-0123456789"
        case "otherTenant": token = APIStack.otherToken
        case "appKey": token = APIStack.appKey
        case "appKeyOther":
            token = APIStack.appKey
            headers["X-Customer-Token"] = customerToken("bob@example.com")
        case "expiredToken":
            token = APIStack.appKey
            headers["X-Customer-Token"] = customerToken("ann@example.com", issuedAgo: 7200)
        case "appKeyAnn":
            token = APIStack.appKey
            headers["X-Customer-Token"] = customerToken("ann@example.com")
        default: token = APIStack.demoToken  // "secret"
        }
        if probe.cleeng {
            if let token { headers["X-Publisher-Token"] = token }
            headers["Authorization"] = "Basic " + Data(APIStack.cleengBasic.utf8).base64EncodedString()
            token = nil
        }
        // Well past the longest wait a route may hold a request (`maxWait`, 30 s: `wait=0x10`
        // parses as 16 s, and no worker runs here), so a loaded machine cannot turn an answer
        // into a deadline error (a full run beside other tests once did, at 30 s).
        return try await api.call(
            HTTPMethod(rawValue: probe.method), probe.path, token: token, headers: headers,
            body: probe.body, timeout: .seconds(90))
    }

    /// What a hostile client sends instead of `probe`: broken and hostile bodies, odd path
    /// parameters, hostile query parameters.
    static func malformed(_ probe: Probe) -> [Probe] {
        var variants: [Probe] = []
        if probe.method == "POST" || probe.method == "PUT" {
            let nested = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
            let nestedObjects = String(repeating: #"{"a":"#, count: 50_000) + "1" + String(repeating: "}", count: 50_000)
            var bodies = [
                "", "{", "[1,2]", "null", "\"text\"", "42", "{\"a\":", "{}", "{\"customer\":}", nested, nestedObjects,
                String(repeating: "A", count: 2 << 20), "\u{0}\u{1}\u{2}", "\u{FEFF}{}", "{\"a\":1e999999}", "{\"a\":-1e999999}",
                #"{"customer":"ann@example.com","customer":"bob@example.com"}"#,
            ]
            // Each field of the probe's JSON body with values of every wrong type and size.
            if let body = probe.body, let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] {
                let hostile: [Any] = [
                    42, -1, 1e308, -1e308, 9_223_372_036_854_775_807, true, NSNull(), [Any](), ["nested": ["deeper": [1, 2]]],
                    "", String(repeating: "x", count: 300_000), "\u{0}", "../../etc/passwd", "ann@example.com\r\nX-Injected: 1",
                    "\u{202E}moc.elpmaxe@nna", "😀@example.com", "%00", "{{}}", "'; DROP TABLE customers; --",
                ]
                for key in object.keys.sorted() {
                    for value in hostile {
                        var changed = object
                        changed[key] = value
                        if let data = try? JSONSerialization.data(withJSONObject: changed) {
                            bodies.append(String(decoding: data, as: UTF8.self))
                        }
                    }
                }
                var extra = object
                extra["unexpected"] = "field"
                if let data = try? JSONSerialization.data(withJSONObject: extra) { bodies.append(String(decoding: data, as: UTF8.self)) }
            }
            if probe.contentType.contains("form") {
                bodies += [
                    "username=&receipt=&product=", "username=%ZZ&receipt=%&product=%%", String(repeating: "a=b&", count: 50_000),
                    "username=ann%00&receipt=AAAA&product=com.entitle.demo.credits.100&price=1e999&currency="
                        + String(repeating: "U", count: 1000),
                ]
            }
            for body in bodies {
                var variant = probe
                variant.body = body
                variants.append(variant)
            }
        }
        // Path parameters and query strings.
        let oddIds = [
            "..%2F..%2Fetc%2Fpasswd", "%00", "%FF%FE", String(repeating: "a", count: 10_000), "ann%40example.com%0A", "%E2%80%AE",
            "%20", "%25", "a%2Fb", "🙂", "ann%40example.com%00admin",
        ]
        let parts = probe.path.split(separator: "?", maxSplits: 1).map(String.init)
        let segments = parts[0].split(separator: "/").map(String.init)
        for index in segments.indices where index >= 2 {
            for odd in oddIds {
                var changed = segments
                changed[index] = odd
                var variant = probe
                variant.path = "/" + changed.joined(separator: "/") + (parts.count > 1 ? "?" + parts[1] : "")
                variants.append(variant)
            }
        }
        let queries = [
            "wait=-1", "wait=1e308", "wait=NaN", "wait=99999999999999999999", "wait=0x10", "at=9223372036854775807",
            "at=-9223372036854775808", "at=1e308", "at=2026-13-45T99:99:99Z", "limit=-5", "limit=99999999999999999999", "limit=1e9",
            "username=%00&receipt=%&product=", String(repeating: "a=b&", count: 2000), "%", "&&&=&=",
        ]
        for query in queries {
            var variant = probe
            variant.path = parts[0] + "?" + query
            variants.append(variant)
        }
        return variants
    }
}
