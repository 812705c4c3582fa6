import Foundation
import HTTPTypes
import Hummingbird

extension EntitleAPI {
    func registerDashboard(on routes: RouteTable) {
        // The page holds no data and no secret: its script calls the admin routes with the
        // token the operator gives (the URL's #token=..., kept in the tab's session storage).
        // Script and styles are files of their own, so the policy allows no inline code, and
        // no other site may frame the page.
        routes.add(.get, "/dashboard") { _, _ in Self.asset(DashboardPage.html, type: "text/html; charset=utf-8") }
        routes.add(.get, "/dashboard/app.css") { _, _ in Self.asset(DashboardPage.css, type: "text/css; charset=utf-8") }
        routes.add(.get, "/dashboard/app.js") { _, _ in Self.asset(DashboardPage.script, type: "text/javascript; charset=utf-8") }
    }

    static let dashboardPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        + "form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

    static func asset(_ text: String, type: String) -> Response {
        var headers: HTTPFields = [
            .contentType: type, .contentSecurityPolicy: dashboardPolicy, .cacheControl: "no-store", .xContentTypeOptions: "nosniff",
        ]
        for (name, value) in [("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer")] {
            if let name = HTTPField.Name(name) { headers[name] = value }
        }
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// The operators' dashboard: plain HTML, CSS and JavaScript files, no build step, served
/// from the package's resources (`Resources/Dashboard`), read once.
enum DashboardPage {
    /// A file of the dashboard; a missing one (a broken install) says so instead of serving nothing.
    static func file(_ name: String) -> String {
        guard let url = Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Dashboard"),
            let text = try? String(contentsOf: url, encoding: .utf8)
        else { return "the dashboard's \(name) is missing from this build's resources" }
        return text
    }

    static let html = file("index.html")
    static let css = file("app.css")
    static let script = file("app.js")
}
