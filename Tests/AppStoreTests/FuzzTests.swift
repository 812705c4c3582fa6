import AppStore
import Foundation
import FuzzSupport
import Testing

/// Real Apple data from `Tests/Vectors`, mutated (seeded, reproducible: see `Mutator`), through
/// every decoder and verifier: none may trap, none may take more than 5 s on one input.
/// CI runs 3,000 cases; `ENTITLE_FUZZ_ITERATIONS=200000` is the longer local mode.
@Suite struct FuzzTests {
    static func seeds() throws -> [(name: String, text: String)] {
        let folders = ["signed-data", "notifications/v2", "notifications/v1", "receipts/imdhemy", "receipts/revenuecat",
            "receipts/legacy-transaction-receipts", "receipts/verifyReceipt-responses", "api-responses"]
        var seeds: [(String, String)] = []
        for folder in folders {
            let names = try FileManager.default.contentsOfDirectory(atPath: Vectors.url(folder).path).sorted()
            for name in names where [".jws", ".json", ".b64", ".txt"].contains(where: name.hasSuffix) {
                seeds.append(("\(folder)/\(name)", try Vectors.text("\(folder)/\(name)")))
            }
        }
        return seeds
    }

    @Test(.timeLimit(.minutes(10))) func mutatedAppleDataNeverTrapsNorHangs() async throws {
        let seeds = try Self.seeds()
        #expect(seeds.count >= 20, "the vectors are there")
        let binary = try ["receipts/tpinappreceipt/receipt-production", "receipts/tpinappreceipt/receipt-sandbox-g5",
            "receipts/tpinappreceipt/receipt-sandbox-legacy"].map { try Vectors.bytes($0) }
        var configuration = SignedDataVerifier.Configuration()
        configuration.validationTime = .signedDate
        let verifier = SignedDataVerifier(configuration: configuration)
        let receipts = AppReceiptVerifier()
        let inspector = AppleDataInspector()
        var random = Mutator(seed: Mutator.seed)
        let iterations = Mutator.iterations(default: 3000)
        // A mutation may leave what a JWS says unchanged (white space, base64's spare bits) or
        // splice in another whole vector: what verifies must be one of the real transactions.
        var genuine = Set<JWSTransaction>()
        for seed in seeds { if let transaction = try? await verifier.verifyTransaction(seed.text) { genuine.insert(transaction) } }
        #expect(!genuine.isEmpty)
        var verified = 0
        for index in 0..<iterations {
            // The decoders run without suspending: let the other tests' tasks have the
            // cooperative threads between cases (there are two on this machine).
            await Task.yield()
            let seed = seeds[index % seeds.count]
            let other = seeds[Int(random.next() % UInt64(seeds.count))].text
            let text = random.mutateText(seed.text, splicingWith: other)
            let der = random.mutate(binary[index % binary.count], splicingWith: binary[(index + 1) % binary.count])
            try await withinTimeLimit("case \(index) of seed \(Mutator.seed), from \(seed.name)") {
                if let transaction = try? await verifier.verifyTransaction(text) {
                    verified += 1
                    #expect(genuine.contains(transaction), "case \(index) of seed \(Mutator.seed): a changed transaction verified: \(text)")
                }
                _ = try? await verifier.verifyRenewalInfo(text)
                _ = try? await verifier.verifyNotificationContents(text)
                _ = try? await verifier.verifyAppTransaction(text)
                _ = await inspector.inspect(text)
                _ = try? JSONDecoder().decode(VerifyReceiptResponse.self, from: Data(text.utf8))
                _ = try? JSONDecoder().decode(NotificationPayload.self, from: Data(text.utf8))
                _ = try? LegacyTransactionReceipt(base64: text)
                _ = try? await receipts.verify(base64: text)
                _ = try? await receipts.verify(der: der)
            }
        }
        print("fuzz: \(iterations) mutated inputs (seed \(Mutator.seed)) through 10 decoders each; \(verified) mutated JWS still verified as transactions")
    }
}
