import AppStore
import Foundation
import Testing

@Suite struct AppleBase64Tests {
    /// The byte-wise encoder agrees with Foundation's (URL alphabet, no padding) for every
    /// length remainder, and decoding gives the bytes back.
    @Test func encodesLikeFoundationAndRoundTrips() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let reference = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let encoded = AppleBase64.encodeURL(bytes)
            #expect(encoded == reference, "length \(length)")
            #expect(AppleBase64.decode(encoded) == bytes, "length \(length)")
        }
    }
}
