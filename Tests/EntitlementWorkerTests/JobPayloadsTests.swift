import EntitleCore
import Foundation
import Testing

/// What the worker reads from a payload before decoding it.
@Suite struct JobPayloadsTests {
    @Test func thePublisherIsReadWithoutDecodingThePayload() throws {
        let jws = String(repeating: "eyJhbGciOiJFUzI1NiJ9.", count: 200)
        #expect(JobPayloads.publisher(in: #"{"customer":"ann","publisher":"demo","signedTransaction":"\#(jws)"}"#) == "demo")
        #expect(JobPayloads.publisher(in: #"{"publisher":"a-b_c.d"}"#) == "a-b_c.d")
        // As the encoder writes it for every payload it makes: the first "publisher" key.
        let encoded = String(decoding: try JSONEncoder().encode(["publisher": "softphone"]), as: UTF8.self)
        #expect(JobPayloads.publisher(in: encoded) == "softphone")
        for none in ["", "{}", #"{"publisher":""}"#, #"{"publisher":"de\"mo"}"#, #"{"publisher":"demo"#, #"{"publisher": "demo"}"#, #""publisher":""#] {
            #expect(JobPayloads.publisher(in: none) == nil, "\(none)")
        }
    }
}
