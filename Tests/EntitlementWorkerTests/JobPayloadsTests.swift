import EntitleCore
import Foundation
import JobQueue
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

    /// A notification's job id names it, and is always a job id's form, whatever Apple sent.
    @Test func aNotificationsJobIdNamesItAndIsAlwaysAJobId() throws {
        let uuid = "002e14d5-51f5-4503-b5a8-c3a1af68eb20"
        #expect(JobPayloads.Notification.jobId(uuid) == "notification:" + uuid)
        let digest = String(repeating: "ab12", count: 8)
        #expect(JobPayloads.Notification.jobId(digest) == "notification:" + digest)
        for odd in ["", "a b", "x/../y", "é", String(repeating: "a", count: 101), "{tag}"] {
            let id = JobPayloads.Notification.jobId(odd)
            #expect(id.hasPrefix("notification:") && id.utf8.count == 45 && id != JobPayloads.Notification.jobId(odd + "!"), "\(odd)")
            try EnqueueRequest(type: "notification", id: id).validate()
        }
    }
}
