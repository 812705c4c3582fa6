import AppStore
import Foundation

// Verifies the given signed transactions round-robin, single task, and prints one JSON line:
// verifications, wall seconds, CPU seconds, verifications per CPU second.
// Usage: verify-bench ITERATIONS BUNDLE_ID FILE...
// With VERIFY_BENCH_COLD=1 every verification uses a new verifier (no chain cache): the cost
// of a chain seen for the first time.

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count >= 3, let iterations = Int(arguments.first ?? "") else {
    FileHandle.standardError.write(Data("usage: verify-bench ITERATIONS BUNDLE_ID FILE...\n".utf8))
    exit(2)
}
let bundleId = arguments.dropFirst().first ?? ""
let inputs = try arguments.dropFirst(2).map {
    try String(contentsOfFile: $0, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
}
let configuration = SignedDataVerifier.Configuration(bundleId: bundleId, environment: .sandbox)
let cold = ProcessInfo.processInfo.environment["VERIFY_BENCH_COLD"] == "1"
let verifier = SignedDataVerifier(configuration: configuration)

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

// Warm-up: fills the chain cache as a long-running server's would be.
for input in inputs { _ = try await verifier.verifyTransaction(input) }
let wallStart = ContinuousClock.now
let cpuStart = cpuSeconds()
// On the global executor, as a job handler runs: top-level code is the main actor's, and
// awaiting the verifier from there would hop between threads twice per verification.
let checksum = try await Task.detached {
    var checksum = 0
    for index in 0..<iterations {
        let transaction = try await (cold ? SignedDataVerifier(configuration: configuration) : verifier)
            .verifyTransaction(inputs[index % inputs.count])
        checksum &+= transaction.transactionId?.utf8.count ?? 0
    }
    return checksum
}.value
let cpu = cpuSeconds() - cpuStart
let wall = (ContinuousClock.now - wallStart) / .seconds(1)
print(
    #"{"impl":"\#(cold ? "entitle-cold" : "entitle")","verifications":\#(iterations),"wall_s":\#(wall),"cpu_s":\#(cpu),"per_cpu_s":\#(Double(iterations) / cpu),"checksum":\#(checksum)}"#
)
