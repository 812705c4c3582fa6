import AppStore
import AppStoreSimulator
import Foundation
import Testing

/// The simulator's signing: its default header, made once, is the one its chain gives.
@Suite struct SigningAuthorityTests {
    @Test func theDefaultHeaderIsTheOneTheChainWouldGive() throws {
        let authority = try SigningAuthority()
        let payload = Array(#"{"a":1}"#.utf8)
        let byDefault = try authority.sign(payload: payload).split(separator: ".")
        let named = try authority.sign(payload: payload, chain: [authority.leaf, authority.intermediate, authority.root])
            .split(separator: ".")
        #expect(byDefault[0] == named[0])
        let header = try #require(AppleBase64.decode(byDefault[0]))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])
        #expect(object["alg"] as? String == "ES256")
        #expect((object["x5c"] as? [String])?.count == 3)
    }
}
