/// Which purchases a report counts. Apple's own reports count the production App Store
/// only; purchases in the sandbox (TestFlight, App Review, a developer's device, Xcode's
/// StoreKit testing) cost nobody anything, and sandbox subscriptions renew on compressed
/// schedules (daily in TestFlight, every few minutes for sandbox accounts), so they are kept
/// apart: never in production figures, readable on their own.
public enum ReportEnvironment: String, Sendable, Hashable, Codable, CaseIterable {
    case production, sandbox

    /// The report a purchase in Apple's environment `name` belongs to: `Production`, or none
    /// given (an import, an entry from before environments were kept), is production; any
    /// other (`Sandbox`, `Xcode`, `LocalTesting`) is sandbox.
    public init(apple name: String?) {
        self = name == nil || name == "" || name == "Production" ? .production : .sandbox
    }
}
