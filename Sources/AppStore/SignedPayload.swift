/// A payload Apple signs as a JWS, with the fields the verifier checks.
public protocol SignedPayload: Decodable, Sendable {
    /// When Apple signed it; the default time the certificate chain is checked at.
    var signedDate: AppleTimestamp? { get }
    /// The environment the payload says it comes from.
    var payloadEnvironment: AppStoreEnvironment? { get }
    /// The bundle id the payload names, where it names one.
    var payloadBundleId: String? { get }
    /// The app Apple id the payload names, where it names one.
    var payloadAppAppleId: Int64? { get }
}
