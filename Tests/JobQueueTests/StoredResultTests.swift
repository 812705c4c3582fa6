import Foundation
import Testing

@testable import JobQueue

/// `StoredResult`'s form, apart from Redis (FinishedRecordTests runs it through `finish`).
@Suite struct StoredResultTests {
    /// A record's fields as `finish` lays a result out: a packed one in pieces of 64 bytes.
    static func fields(_ stored: (text: String, packed: Bool)) -> [String: String] {
        guard stored.packed else { return ["result": stored.text] }
        var fields: [String: String] = [:]
        var rest = Substring(stored.text)
        for name in StoredResult.pieceFields where !rest.isEmpty || name == "result" {
            fields[name] = String(rest.prefix(64))
            rest = rest.dropFirst(64)
        }
        return fields
    }

    /// Packed on 2026-11-27: the dictionary is named by `z1:` and zlib's header carries its
    /// checksum, so a change to it would leave every stored result unreadable.
    @Test func aResultPackedWithTheFirstDictionaryReadsBack() {
        let stored =
            "z1:WKRPzfUhG6qpK9fImEACy4A4JjU3szQXNbHBBHEHqJGhuaWpuZmxgYmBqaGJkQmBNAi1Wi8lNTdfD2q6Xm5+XklGTiVa+gQpoWEaJeASOqdfLMF"
            + "IcSyQ5F8isgCGJbUAHAQAww=="
        #expect(StoredResult.result { Self.fields((stored, true))[$0] } == FinishedRecordTests.receiptResult)
    }

    /// Producers in other languages read results with `Jobs/result.dictionary`.
    @Test func theShippedDictionaryIsTheOneWorkersDeflateWith() throws {
        let shipped = try Data(contentsOf: JobsFolderTests.jobsFolder.appendingPathComponent("result.dictionary"))
        #expect(shipped == Data(StoredResult.dictionary))
    }

    /// Packed only where it saves bytes and fits 16 pieces; anything else stays as it is,
    /// but a text that would read as packed, which is kept as a JSON string of itself.
    @Test func onlyALongResultThatDeflatesShorterIsPacked() {
        let receipt = StoredResult.stored(FinishedRecordTests.receiptResult)
        #expect(
            receipt.packed && receipt.text.hasPrefix("z1:") && receipt.text.utf8.count * 4 < FinishedRecordTests.receiptResult.utf8.count)
        let short = #"{"ok":true,"pad":""# + String(repeating: "0", count: 64 - 20) + #""}"#
        #expect(short.utf8.count == 64 && StoredResult.stored(short) == (short, false))
        var generator = SystemRandomNumberGenerator()
        // 90 printable characters, about 6.5 bits each: deflated and in base64, longer.
        let printable = (0x23...0x7e).map { Character(UnicodeScalar(UInt8($0))) }.filter { $0 != "\\" }
        let noise = #"""# + String((0..<600).map { _ in printable.randomElement(using: &generator)! }) + #"""#
        #expect(StoredResult.stored(noise) == (noise, false), "random text deflates no shorter once in base64")
        let long = #"[\#((0..<3_000).map { _ in String(UInt32.random(in: 0...UInt32.max, using: &generator)) }.joined(separator: ","))]"#
        #expect(StoredResult.stored(long) == (long, false), "more than 16 pieces")
        for result in [short, noise, long, FinishedRecordTests.receiptResult] {
            #expect(StoredResult.result { Self.fields(StoredResult.stored(result))[$0] } == result)
        }
        // A handler's text that is not JSON but starts as a packed result does reads back as
        // a JSON string of itself, packed or not.
        for marked in ["z1:not JSON", "z1:" + String(repeating: "y", count: 500), "z1:" + noise] {
            let read = StoredResult.result { Self.fields(StoredResult.stored(marked))[$0] } ?? ""
            #expect((try? JSONDecoder().decode(String.self, from: Data(read.utf8))) == marked)
            #expect(read == StoredResult.unambiguous(marked))
        }
        #expect(StoredResult.stored("z1:" + String(repeating: "y", count: 500)).packed)
    }
}
