import Foundation

/// Finds the project's configuration files: in `$ENTITLE_CONFIG_DIR`, `./Config`, or the
/// `Config` of the checkout the executable was built in (so `swift run` and the built
/// binary work from anywhere in a checkout).
enum ConfigFiles {
    static func find(_ name: String) -> URL? {
        var candidates: [URL] = []
        if let directory = ProcessInfo.processInfo.environment["ENTITLE_CONFIG_DIR"], !directory.isEmpty {
            candidates.append(URL(fileURLWithPath: directory))
        }
        candidates.append(URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appending(path: "Config"))
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<5 {
            candidates.append(directory.appending(path: "Config"))
            directory = directory.deletingLastPathComponent()
        }
        return candidates.map { $0.appending(path: name) }.first { FileManager.default.fileExists(atPath: $0.path) }
    }
}
