/// Why a catalog cannot be used; each case names the entry at fault.
public enum CatalogError: Error, Sendable, Hashable, CustomStringConvertible {
    case unreadable(String)
    case invalidEntry(entry: String, problem: String)

    public var description: String {
        switch self {
        case .unreadable(let reason): "the catalog cannot be read: \(reason)"
        case .invalidEntry(let entry, let problem): "\(entry): \(problem)"
        }
    }
}
