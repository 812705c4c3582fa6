import Foundation
import HTTPAPI
import Testing

/// docs/openapi.json describes exactly the routes the API serves, and its examples fit
/// its schemas. (Every response the other API tests read is checked against it too.)
@Suite struct OpenAPITests {
    @Test func theDocumentNamesEveryRouteAndNoOther() async throws {
        let document = OpenAPIDocument.shared
        #expect(document.json.value["openapi"] as? String == "3.1.0")
        let served = try await Self.servedRoutes()
        #expect(
            Set(served) == document.routes,
            "missing from the document: \(Set(served).subtracting(document.routes)); not served: \(document.routes.subtracting(served))")
        #expect(served.count == Set(served).count, "a route is registered twice")
    }

    @Test func everyExampleFitsItsSchema() throws {
        let document = OpenAPIDocument.shared
        var checked = 0
        for route in document.routes.sorted() {
            let operation = try #require(document.operation(route))
            var media: [(String, [String: Any])] = []
            if let content = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any] {
                media += content.compactMap { key, value in (value as? [String: Any]).map { ("\(route) request \(key)", $0) } }
            }
            for (status, response) in operation["responses"] as? [String: Any] ?? [:] {
                let content = (response as? [String: Any])?["content"] as? [String: Any] ?? [:]
                media += content.compactMap { key, value in (value as? [String: Any]).map { ("\(route) \(status) \(key)", $0) } }
            }
            for (name, item) in media {
                guard let example = item["example"], let schema = item["schema"] else { continue }
                let problems = document.validate(example, schema, at: "$")
                #expect(problems.isEmpty, "\(name): \(problems)")
                checked += 1
            }
            #expect(operation["responses"] != nil && operation["summary"] != nil, "\(route) needs a summary and responses")
        }
        #expect(checked >= 40, "only \(checked) examples")
        // The checker itself refuses what does not fit.
        let job = ["$ref": "#/components/schemas/Job"]
        #expect(!document.validate(["id": "x"], job, at: "$").isEmpty)
        #expect(!document.validate(["jobId": 5], ["$ref": "#/components/schemas/JobAccepted"], at: "$").isEmpty)
        #expect(!document.validate(["jobId": "a", "extra": 1], ["$ref": "#/components/schemas/JobAccepted"], at: "$").isEmpty)
        #expect(!document.validate(true, ["type": "integer"], at: "$").isEmpty)
    }

    /// The routes of an API built on the real configuration.
    static func servedRoutes() async throws -> [String] {
        let routes = Routes()
        try await APIStack.run("routes") { api in await routes.set(api.routes) }
        return await routes.value
    }

    actor Routes {
        var value: [String] = []
        func set(_ routes: [String]) { value = routes }
    }
}
