import Foundation
import LocalProcesses
import RedisClient

extension ChildProcess {
    /// The `entitle` executable built next to the test bundle.
    public static var entitleExecutable: String {
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return bundle.appendingPathComponent("entitle").path
    }
}
