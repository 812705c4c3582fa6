/// A Lua script run by EVALSHA. Its SHA1 is computed here, so every connection can run it
/// without a round trip; when the server does not know it (NOSCRIPT, after a restart or
/// `SCRIPT FLUSH`) the connection runs it once by EVAL, which caches it again.
public struct RedisScript: Sendable, Hashable {
    public let name: String
    public let source: String
    public let sha1: String

    public init(name: String, source: String) {
        self.name = name
        self.source = source
        self.sha1 = SHA1.hexDigest(Array(source.utf8))
    }

    /// The EVALSHA command (or EVAL, `bySource`) for these keys and arguments.
    public func command(keys: [String], arguments: [String], bySource: Bool = false) -> [String] {
        var command = bySource ? ["EVAL", source, String(keys.count)] : ["EVALSHA", sha1, String(keys.count)]
        command.reserveCapacity(3 + keys.count + arguments.count)
        command.append(contentsOf: keys)
        command.append(contentsOf: arguments)
        return command
    }
}

/// SHA-1, only to name scripts the way Redis does (not for security).
enum SHA1 {
    static func hexDigest(_ message: [UInt8]) -> String {
        var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
        var data = message
        let bitLength = UInt64(message.count) * 8
        data.append(0x80)
        while data.count % 64 != 56 { data.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) { data.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift))) }
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: data.count, by: 64) {
            for i in 0..<16 {
                let b = chunk + i * 4
                w[i] = UInt32(data[b]) << 24 | UInt32(data[b + 1]) << 16 | UInt32(data[b + 2]) << 8 | UInt32(data[b + 3])
            }
            for i in 16..<80 {
                let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w[i] = (x << 1) | (x >> 31)
            }
            var (a, b, c, d, e) = h
            for i in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch i {
                case 0..<20: (f, k) = ((b & c) | (~b & d), 0x5A82_7999)
                case 20..<40: (f, k) = (b ^ c ^ d, 0x6ED9_EBA1)
                case 40..<60: (f, k) = ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
                default: (f, k) = (b ^ c ^ d, 0xCA62_C1D6)
                }
                let temp = ((a << 5) | (a >> 27)) &+ f &+ e &+ k &+ w[i]
                e = d
                d = c
                c = (b << 30) | (b >> 2)
                b = a
                a = temp
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
        return [h.0, h.1, h.2, h.3, h.4].map { word in
            let hex = String(word, radix: 16)
            return String(repeating: "0", count: 8 - hex.count) + hex
        }.joined()
    }
}
