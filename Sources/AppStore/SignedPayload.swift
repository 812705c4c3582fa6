/// A payload Apple signs as a JWS, with the fields the verifier checks.
public protocol SignedPayload: Decodable, Sendable {
    /// When Apple signed it; the default time the certificate chain is checked at.
    var signedDate: AppleTimestamp? { get }
    /// The environment the payload says it comes from.
    var payloadEnvironment: AppStoreEnvironment? { get }
    /// The bundle id the payload names, where it names one.
    var payloadBundleId: String? { get }
    /// Whether this kind of payload always names its app (transactions, app transactions and
    /// notifications do; renewal infos never do). One of a kind that should, naming none, is
    /// refused by a verifier for a given app.
    static var namesItsApp: Bool { get }
    /// Why this authentic payload is not one of its kind (a signed transaction decoded as a
    /// notification decodes, with nothing in it), or nil when it is.
    var kindProblem: String? { get }
    /// The app Apple id the payload names, where it names one.
    var payloadAppAppleId: Int64? { get }
}

extension SignedPayload {
    public static var namesItsApp: Bool { true }
    public var kindProblem: String? { nil }
}
