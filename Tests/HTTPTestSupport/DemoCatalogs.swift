import Foundation

/// The demo's catalogs for tests that need publishers beside `demo` under other transfer
/// policies. An app belongs to one publisher, so each such publisher (`keep`, `share`) sells
/// the demo app's products through an app of its own, `com.entitle.PUBLISHER`, with its own
/// product ids and subscription group.
public enum DemoCatalogs {
    /// The repository's root.
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The app a test publisher sells through: `com.entitle.keep`, `com.entitle.share`,
    /// `com.entitle.softphone` (in the demo catalogs), else the demo app.
    public static func bundleId(_ publisher: String) -> String {
        ["keep", "share", "softphone"].contains(publisher) ? "com.entitle.\(publisher)" : "com.entitle.demo"
    }

    /// `value` with the demo app's bundle id (in product ids too) and its subscription group
    /// replaced by those of `bundleId`.
    public static func renamed(_ value: Any, to bundleId: String) -> Any {
        switch value {
        case let text as String:
            let renamed = text.replacingOccurrences(of: "com.entitle.demo", with: bundleId)
            return renamed == "21000001" && bundleId != "com.entitle.demo" ? "21000001-" + bundleId : renamed
        case let list as [Any]: return list.map { renamed($0, to: bundleId) }
        case let object as [String: Any]:
            return Dictionary(
                uniqueKeysWithValues: object.map { (renamed($0.key, to: bundleId) as? String ?? $0.key, renamed($0.value, to: bundleId)) })
        default: return value
        }
    }

    /// A publisher's app entry for the publishers' catalog (sandbox and production).
    public static func app(_ publisher: String) -> [String: Any] {
        [
            "bundleId": bundleId(publisher), "appAppleId": appAppleId(publisher), "environments": ["Sandbox", "Production"],
            "sharedSecretVariable": "ENTITLE_DEMO_SHARED_SECRET",
        ]
    }

    static func appAppleId(_ publisher: String) -> Int { publisher == "keep" ? 1_234_567_891 : 1_234_567_892 }

    /// The simulator's demo catalog with the demo app's apps, groups and products copied for
    /// each of `publishers`; written to a temporary file, whose path is returned.
    public static func writeSimulatorCatalog(copyingDemoFor publishers: [String] = ["keep", "share"]) throws -> String {
        let source = root.appending(path: "Config/simulator-catalog.json")
        guard var document = try JSONSerialization.jsonObject(with: Data(contentsOf: source)) as? [String: Any] else {
            throw CocoaError(.fileReadCorruptFile)
        }
        func isDemo(_ entry: Any) -> Bool {
            guard let object = entry as? [String: Any] else { return false }
            return object["bundleId"] as? String == "com.entitle.demo" || object["id"] as? String == "21000001"
        }
        for key in ["apps", "subscriptionGroups", "products"] {
            let list = document[key] as? [Any] ?? []
            var extended = list
            for publisher in publishers {
                for entry in list where isDemo(entry) {
                    guard var copy = renamed(entry, to: bundleId(publisher)) as? [String: Any] else { continue }
                    if key == "apps" { copy["appAppleId"] = appAppleId(publisher) }
                    extended.append(copy)
                }
            }
            document[key] = extended
        }
        let path = FileManager.default.temporaryDirectory.appending(path: "simulator-catalog-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: document).write(to: URL(fileURLWithPath: path))
        return path
    }
}
