/// What happens when a verified purchase already belongs to another customer (a shared
/// Apple ID, a reinstall under a new account).
public enum TransferPolicy: String, Sendable, Hashable, Codable {
    /// The new customer gets it and the previous owner's access ends (Cleeng's behaviour).
    case transfer
    /// The original owner keeps it; the new customer is refused.
    case keep
    /// Both have access.
    case share
}
