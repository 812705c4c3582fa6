import Crypto

/// SHA-256 as lowercase hex, its first `bytes` bytes (keys and ids, not secrets): one
/// writer for the idempotency keys of notifications, purchases and import lines.
package enum SHA256Hex {
    package static func of(_ text: String, bytes: Int = 32) -> String {
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(2 * bytes)
        for byte in SHA256.hash(data: Array(text.utf8)).prefix(bytes) {
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
