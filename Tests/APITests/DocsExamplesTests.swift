import Foundation
import LocalProcesses
import RedisClient
import RedisTestSupport
import Testing

/// The examples of docs/api.md marked `<!-- run: NAME -->`, run exactly as written (with
/// bash and curl, the variables the guide names set to a real stack's), each command's
/// output compared with the `# ...` lines under it.
@Suite struct DocsExamplesTests {
    /// A command of an example and the output the guide shows for it.
    struct Command {
        var text: String
        var expected: [String]
    }

    /// The marked examples of docs/api.md, by name.
    static func examples() throws -> [String: [Command]] {
        let text = try String(contentsOf: APIStack.root.appending(path: "docs/api.md"), encoding: .utf8)
        var examples: [String: [Command]] = [:]
        var name: String?
        var inBlock = false
        var commands: [Command] = []
        var pending = ""
        // Output lines belong to the command right above them; a blank line ends them.
        var afterCommand = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if !inBlock, line.hasPrefix("<!-- run: "), line.hasSuffix(" -->") {
                name = String(line.dropFirst(10).dropLast(4))
            } else if !inBlock, name != nil, line.hasPrefix("```sh") {
                inBlock = true
                commands = []
                afterCommand = false
            } else if inBlock, line.hasPrefix("```") {
                if let name { examples[name] = commands }
                name = nil
                inBlock = false
            } else if inBlock {
                if line.hasPrefix("# ") {
                    if afterCommand, !commands.isEmpty { commands[commands.count - 1].expected.append(String(line.dropFirst(2))) }
                } else if line.trimmingCharacters(in: .whitespaces).isEmpty {
                    afterCommand = false
                } else if line.hasSuffix("\\") {
                    pending += line.dropLast() + " "
                } else {
                    commands.append(Command(text: pending + line, expected: []))
                    pending = ""
                    afterCommand = true
                }
            }
        }
        return examples
    }

    /// Whether `line` is `pattern`, where each `...` of the pattern stands for any text.
    static func matches(_ line: String, _ pattern: String) -> Bool {
        let parts = pattern.components(separatedBy: "...")
        guard parts.count > 1 else { return line == pattern }
        guard line.hasPrefix(parts[0]), line.hasSuffix(parts[parts.count - 1]) else { return false }
        var rest = line.dropFirst(parts[0].count).dropLast(parts[parts.count - 1].count)
        for part in parts.dropFirst().dropLast() where !part.isEmpty {
            guard let range = rest.range(of: part) else { return false }
            rest = rest[range.upperBound...]
        }
        return true
    }

    @Test func theMatcherTakesDotsForAnyTextAndNothingElse() {
        #expect(Self.matches(#"{"jobId":"abc","message":"OK"}"#, #"{"jobId":"...","message":"OK"}"#))
        #expect(!Self.matches(#"{"jobId":"abc","message":"KO"}"#, #"{"jobId":"...","message":"OK"}"#))
        #expect(Self.matches("<a>1</a><b>2</b>", "<a>...</a><b>...</b>"))
        #expect(!Self.matches("<a>1</a><c>2</c>", "<a>...</a><b>...</b>"))
        #expect(!Self.matches("x", "y"))
    }

    @Test(.timeLimit(.minutes(3))) func theMarkedExamplesOfTheGuideRunAsWritten() async throws {
        let examples = try Self.examples()
        #expect(Set(examples.keys) == ["cleeng-payment", "cleeng-read", "softphone"], "the guide's marked examples: \(examples.keys)")
        try await APIStack.run("docs", worker: true) { api in
            let base = [
                "API": api.url, "TOKEN": APIStack.demoToken, "SOFTPHONE_TOKEN": APIStack.softphoneToken,
                "SOFTPHONE_APP_KEY": APIStack.softphoneAppKey,
                "BASICAUTH": "Basic " + Data(APIStack.cleengBasic.utf8).base64EncodedString(),
            ]
            func run(_ name: String, _ extra: [String: String]) async throws {
                let commands = try #require(examples[name], "docs/api.md has no example \(name)")
                #expect(!commands.isEmpty && commands.allSatisfy { !$0.expected.isEmpty }, "\(name): every command shows its output")
                for command in commands {
                    let result = try await ChildProcess.run("/bin/bash", ["-c", command.text], environment: base.merging(extra) { $1 })
                    #expect(result.status == 0, "\(name): \(command.text.prefix(80)): \(result.errors)")
                    let output = result.output.split(separator: "\n").map(String.init)
                    #expect(output.count == command.expected.count, "\(name): \(command.text.prefix(80)) printed \(result.output)")
                    for (line, pattern) in zip(output, command.expected) {
                        #expect(Self.matches(line, pattern), "\(name): \(line)\ndoes not match the guide's\n\(pattern)")
                    }
                }
            }
            // Cleeng: a subscription's receipt paid for, then read the Cleeng way.
            let premium = try await api.buy("premium.monthly", account: nil, extra: ["environment": "Production"])
            try await run(
                "cleeng-payment",
                [
                    "RECEIPT": try #require(premium["appReceipt"] as? String),
                    "TRANSACTION": try #require(premium["transactionId"] as? String),
                ])
            try await api.settle()
            try await run("cleeng-read", [:])
            // Cloud Softphone: a credits receipt with a + in it, as the app has it.
            var credits = try await api.buy("credits.100", publisher: "softphone")
            while (credits["appReceipt"] as? String)?.contains("+") != true {
                credits = try await api.buy("credits.100", publisher: "softphone")
            }
            try await run("softphone", ["RECEIPT": try #require(credits["appReceipt"] as? String)])
        }
    }
}
