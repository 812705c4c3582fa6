import Foundation

/// How far one app's notifications in one environment have been reconciled with Apple's
/// Notification History, and the page a reconcile under way reached (so a killed job
/// resumes there with the same request, as Apple's paging asks).
package struct ReconcileCursor: Sendable, Hashable {
    /// Everything Apple first sent before this moment was brought in.
    package var through: Date?
    /// The window under way and the next page's token.
    package var start: Date?
    package var end: Date?
    package var token: String?

    package init(through: Date? = nil, start: Date? = nil, end: Date? = nil, token: String? = nil) {
        self.through = through
        self.start = start
        self.end = end
        self.token = token
    }
}

extension EntitlementStore {
    package func reconcileCursor(publisher: String, bundleId: String, environment: String) async throws -> ReconcileCursor {
        let key = keys.reconciled(publisher, bundleId: bundleId, environment: environment)
        let values = try await redis.send(["HMGET", key, "through", "start", "end", "token"]).array ?? []
        func date(_ index: Int) -> Date? {
            guard index < values.count, let text = values[index].string, let ms = Double(text) else { return nil }
            return Date(timeIntervalSince1970: ms / 1000)
        }
        return ReconcileCursor(through: date(0), start: date(1), end: date(2), token: values.count > 3 ? values[3].string : nil)
    }

    /// Writes the cursor whole (fields it leaves nil are removed).
    package func saveReconcileCursor(_ cursor: ReconcileCursor, publisher: String, bundleId: String, environment: String) async throws {
        let key = keys.reconciled(publisher, bundleId: bundleId, environment: environment)
        func ms(_ date: Date?) -> String? { date.map { String(Int64((($0.timeIntervalSince1970) * 1000).rounded(.down))) } }
        let fields: [(String, String?)] = [
            ("through", ms(cursor.through)), ("start", ms(cursor.start)), ("end", ms(cursor.end)), ("token", cursor.token),
        ]
        let set = fields.compactMap { name, value in value.map { [name, $0] } }.flatMap { $0 }
        let removed = fields.filter { $0.1 == nil }.map(\.0)
        // One key, one MULTI: the cursor is never half written.
        var commands: [[String]] = [["MULTI"]]
        if !removed.isEmpty { commands.append(["HDEL", key] + removed) }
        if !set.isEmpty { commands.append(["HSET", key] + set) }
        commands.append(["EXEC"])
        _ = try await redis.pipeline(commands)
    }
}
