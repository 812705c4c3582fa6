import AppStore
import DurationUnits
import EntitleCore
import Foundation
import Testing

/// Secrets compared in constant time, read from files and rotated, and never printed.
@Suite struct SecretHandlingTests {
    @Test func comparisonsDoNotFoldLengths() {
        #expect(ConstantTime.equal("shared-secret", "shared-secret"))
        #expect(!ConstantTime.equal("shared-secret", "shared-secreT"))
        // The old comparison folded the length difference into 8 bits and padded with zeros:
        // the secret followed by 256 NULs compared equal.
        #expect(!ConstantTime.equal("abc", "abc" + String(repeating: "\u{0}", count: 256)))
        #expect(!ConstantTime.equal("", String(repeating: "\u{0}", count: 256)))
        #expect(ConstantTime.matchesAny("b", [Secret("a"), Secret("b")]) && !ConstantTime.matchesAny("c", [Secret("a"), Secret("b")]))
    }

    @Test func secretsComeFromTheVariableOrItsFileOneALine() throws {
        let file = FileManager.default.temporaryDirectory.appending(path: "secret-\(UUID().uuidString)").path
        try "  old-token \n\nnew-token\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let reader = SecretReader(environment: [
            "A": "s3cr3t-v4lue", "B_FILE": file, "B": "ignored: the file wins", "EMPTY": " ", "C_FILE": "/nonexistent",
        ])
        #expect(try reader.secrets("A").map(\.value) == ["s3cr3t-v4lue"])
        #expect(try reader.secrets("B").map(\.value) == ["old-token", "new-token"])
        #expect(try reader.secrets("EMPTY").isEmpty && reader.secrets("UNSET").isEmpty)
        let unreadable = #expect(throws: SecretError.self) { try reader.secrets("C") }
        #expect(unreadable?.description == "C_FILE names /nonexistent, which cannot be read")
        let missing = #expect(throws: SecretError.self) { try reader.required("UNSET", for: "publisher \"p\" webhook") }
        #expect(missing?.description == "publisher \"p\" webhook: the environment variable UNSET is not set")
        // Whatever prints a secret or a reader shows none of it.
        var dumped = ""
        dump(reader, to: &dumped)
        dump(Secret("s3cr3t-v4lue"), to: &dumped)
        for text in [dumped, "\(reader)", String(reflecting: reader), "\(Secret("s3cr3t-v4lue"))", "\([Secret("s3cr3t-v4lue")])"] {
            #expect(!text.contains("s3cr3t-v4lue"), "\(text)")
            #expect(!text.contains("old-token") && !text.contains("ignored"))
        }
    }

    @Test func datesBeyondWhat64BitsOfMillisecondsHoldAreClamped() {
        #expect(AppleTimestamp(Date(timeIntervalSince1970: 9.3e15)).milliseconds == .max)
        #expect(AppleTimestamp(Date(timeIntervalSince1970: -9.3e15)).milliseconds == .min)
        #expect(AppleTimestamp.milliseconds(.nan) == 0 && AppleTimestamp.milliseconds(.infinity) == .max)
        #expect(AppleTimestamp(Date(timeIntervalSince1970: 1_800_000_000.5)).milliseconds == 1_800_000_000_500)
    }
}
