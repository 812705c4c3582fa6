import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import JobQueue

/// What `/v1/validate` answers: 200 when the purchase gives access (or credits), 403 (or
/// another 4xx) with a `message` the app shows the user, in XML, JSON or a form.
struct ValidationReply {
    var status: HTTPResponse.Status
    var ok: Bool
    var message: String
    var code: String?
    var jobId: String?
    var offerId: String?
    var creditsBalance: Int?
    var retryAfter: Int?

    init(status: HTTPResponse.Status, ok: Bool, message: String) {
        self.status = status
        self.ok = ok
        self.message = message
    }

    init(_ error: APIError) {
        self.init(status: error.status, ok: false, message: error.message)
        code = error.code
        retryAfter = error.headers[.retryAfter].flatMap { Int($0) }
    }

    /// From the finished `receipt` job.
    init(_ record: JobRecord) {
        let result = record.result.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } ?? [:]
        let granted = result["accessGranted"] as? Bool ?? false
        let credits = result["credits"] as? [String: Any]
        let added = credits?["added"] as? Int ?? 0
        if record.status == .succeeded && (granted || added > 0) {
            self.init(status: .ok, ok: true, message: "Purchase verified. Thank you!")
        } else if record.status == .succeeded {
            self.init(status: .forbidden, ok: false, message: result["message"] as? String ?? "This purchase gives no access.")
            code = result["reason"] as? String
        } else {
            self.init(status: .forbidden, ok: false, message: "The purchase could not be verified.")
            code = "failed"
        }
        jobId = record.id
        offerId = result["offerId"] as? String
        creditsBalance = credits?["balance"] as? Int
    }

    var fields: [(String, String)] {
        var fields = [("result", ok ? "ok" : "error"), ("message", message)]
        if let code { fields.append(("code", code)) }
        if let jobId { fields.append(("jobId", jobId)) }
        if let offerId { fields.append(("offerId", offerId)) }
        if let creditsBalance { fields.append(("credits", String(creditsBalance))) }
        return fields
    }

    func response(_ format: Publisher.APIAccess.Validation.Format) throws -> Response {
        let body: String
        let type: String
        switch format {
        case .json:
            var object: [String: Any] = [:]
            for (name, value) in fields { object[name] = name == "credits" ? Int(value) ?? 0 : value }
            body = String(
                decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self
            )
            type = "application/json; charset=utf-8"
        case .form:
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            body = fields.map { "\($0)=\($1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&")
            type = "application/x-www-form-urlencoded; charset=utf-8"
        case .xml:
            body =
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<response>"
                + fields.map { "<\($0)>\(Self.escapeXML($1))</\($0)>" }.joined() + "</response>\n"
            type = "application/xml; charset=utf-8"
        }
        var headers: HTTPFields = [.contentType: type]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }

    static func escapeXML(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(character)
            }
        }
        return out
    }
}
