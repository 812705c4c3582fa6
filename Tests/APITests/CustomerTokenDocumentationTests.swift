import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// docs/api.md's Python for minting a customer token, run exactly as written: its token opens
/// the customer's entitlements to an app key.
@Suite struct CustomerTokenDocumentationTests {
    @Test func thePythonInTheDocsMintsATokenTheAPITakes() async throws {
        let docs = try String(contentsOf: APIStack.root.appending(path: "docs/api.md"), encoding: .utf8)
        let marker = try #require(docs.range(of: "<!-- customer-token.py: run by CustomerTokenDocumentationTests -->"))
        let after = docs[marker.upperBound...]
        let start = try #require(after.range(of: "```python\n"))
        let end = try #require(after[start.upperBound...].range(of: "```"))
        let snippet = String(after[start.upperBound..<end.lowerBound])
        let script = snippet + "\nimport sys\nprint(customer_token(sys.argv[1], 'demo', 'k1', sys.argv[2].encode()))\n"
        let minted = try await ChildProcess.run("/usr/bin/python3", ["-c", script, "ann@example.com", APIStack.customerTokenSecret])
        #expect(minted.status == 0, "\(minted.errors)")
        let token = minted.output.trimmingCharacters(in: .whitespacesAndNewlines)
        try await APIStack.run("docs-token") { api in
            let reply = try await api.call(
                .GET, "/v1/customers/ann%40example.com/entitlements", token: APIStack.appKey, headers: ["X-Customer-Token": token])
            #expect(reply.status == 404, "authenticated as ann, who has bought nothing yet: \(reply.text)")
            let other = try await api.call(
                .GET, "/v1/customers/bob%40example.com/entitlements", token: APIStack.appKey, headers: ["X-Customer-Token": token])
            #expect(other.status == 403)
        }
    }
}
