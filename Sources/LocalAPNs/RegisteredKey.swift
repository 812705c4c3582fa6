import Crypto

/// A provider key as the local APNs keeps it: the parsed public key, its team, and the bundle ids it
/// may push to.
struct RegisteredKey: Sendable {
    let teamId: String
    let topics: Set<String>
    /// `nil` when the registered PEM was no P-256 key: every token naming this key is then refused.
    let publicKey: P256.Signing.PublicKey?

    init(_ key: LocalAPNs.Key) {
        teamId = key.teamId
        topics = Set(key.topics)
        // A private key (a `.p8` file) is accepted too: its public half is all that is kept.
        publicKey =
            (try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM))
            ?? (try? P256.Signing.PrivateKey(pemRepresentation: key.publicKeyPEM))?.publicKey
    }
}
