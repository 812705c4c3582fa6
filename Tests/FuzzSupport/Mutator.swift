import Foundation

/// Seeded, reproducible mutations of real inputs, for fuzz tests that run the same cases on
/// every CI run and more of them locally.
///
/// `ENTITLE_FUZZ_SEED` picks the seed (a failing case prints its seed and index, so it can be
/// run again alone); `ENTITLE_FUZZ_ITERATIONS` how many cases a test runs (its own default in CI).
public struct Mutator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public static var seed: UInt64 {
        ProcessInfo.processInfo.environment["ENTITLE_FUZZ_SEED"].flatMap { UInt64($0) } ?? 20_261_123
    }

    public static func iterations(default value: Int) -> Int {
        ProcessInfo.processInfo.environment["ENTITLE_FUZZ_ITERATIONS"].flatMap { Int($0) }.map { max(1, $0) } ?? value
    }

    public init(seed: UInt64) { state = seed }

    /// SplitMix64: small, fast and good enough to choose mutations.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// One to four mutations of `input`: bit flips, byte changes, insertions, deletions,
    /// truncation, duplicated or swapped chunks, boundary bytes, or a splice with `other`.
    public mutating func mutate(_ input: [UInt8], splicingWith other: [UInt8] = []) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &self) {
            let count = bytes.count
            switch Int.random(in: 0..<9, using: &self) {
            case 0 where count > 0:
                let index = Int.random(in: 0..<count, using: &self)
                bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &self)
            case 1 where count > 0:
                bytes[Int.random(in: 0..<count, using: &self)] = UInt8.random(in: 0...255, using: &self)
            case 2:
                let index = Int.random(in: 0...count, using: &self)
                bytes.insert(contentsOf: (0..<Int.random(in: 1...16, using: &self)).map { _ in UInt8.random(in: 0...255, using: &self) }, at: index)
            case 3 where count > 1:
                let start = Int.random(in: 0..<count, using: &self)
                bytes.removeSubrange(start..<min(count, start + Int.random(in: 1...64, using: &self)))
            case 4 where count > 1:
                bytes.removeSubrange(Int.random(in: 0..<count, using: &self)...)
            case 5 where count > 1:
                let start = Int.random(in: 0..<count, using: &self)
                let chunk = bytes[start..<min(count, start + Int.random(in: 1...256, using: &self))]
                bytes.insert(contentsOf: chunk, at: Int.random(in: 0...count, using: &self))
            case 6 where count > 0:
                let boundary: [UInt8] = [0x00, 0x7F, 0x80, 0xFF, 0x30, 0x82, 0x2E, 0x22, 0x7B, 0x5B, 0x5C]
                bytes[Int.random(in: 0..<count, using: &self)] = boundary[Int.random(in: 0..<boundary.count, using: &self)]
            case 7 where !other.isEmpty && count > 0:
                let cut = Int.random(in: 0..<count, using: &self)
                let from = Int.random(in: 0..<other.count, using: &self)
                bytes = Array(bytes[..<cut]) + Array(other[from...])
            case 8 where count > 3:
                // A length or tag field made huge, as a hostile encoder would.
                let index = Int.random(in: 0..<(count - 3), using: &self)
                bytes.replaceSubrange(index..<(index + 3), with: [0x84, 0x7F, 0xFF])
            default:
                bytes.append(UInt8.random(in: 0...255, using: &self))
            }
        }
        return bytes
    }

    /// A mutated string that stays ASCII-printable where the input was (base64, JWS, JSON
    /// text): mutates the text, then maps every byte into the printable range half of the time.
    public mutating func mutateText(_ input: String, splicingWith other: String = "") -> String {
        var bytes = mutate(Array(input.utf8), splicingWith: Array(other.utf8))
        if Bool.random(using: &self) { bytes = bytes.map { 0x20 + $0 % 0x5F } }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Runs `body` and fails the case (by throwing) when it takes longer than `limit`; a
/// synchronous hang is caught by the test's time limit.
public func withinTimeLimit<T>(_ what: String, limit: Duration = .seconds(5), _ body: () async throws -> T) async throws -> T {
    let started = ContinuousClock.now
    let result = try await body()
    let elapsed = ContinuousClock.now - started
    if elapsed > limit { throw FuzzHang(what: what, elapsed: elapsed) }
    return result
}

public struct FuzzHang: Error, CustomStringConvertible {
    public let what: String
    public let elapsed: Duration
    public var description: String { "\(what) took \(elapsed), over the limit" }
}
