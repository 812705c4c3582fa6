import Foundation

/// Base64 as Apple's data uses it: lenient decoding of what apps and Apple actually send
/// (standard or URL-safe alphabets, with or without padding, with line breaks), and the
/// URL-safe encoding of JWS segments.
public enum AppleBase64 {
    private static let table: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, byte) in Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8).enumerated() {
            table[Int(byte)] = UInt8(index)
        }
        table[Int(UInt8(ascii: "+"))] = 62
        table[Int(UInt8(ascii: "-"))] = 62
        table[Int(UInt8(ascii: "/"))] = 63
        table[Int(UInt8(ascii: "_"))] = 63
        return table
    }()

    /// Decodes base64 text; `nil` when a character is outside both alphabets or the length is impossible.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        if let bytes = text.utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return bytes }
        var copy = String(text)
        return copy.withUTF8 { decode(bytes: $0) }
    }

    static func decode(bytes: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var output = [UInt8]()
        output.reserveCapacity(bytes.count * 3 / 4)
        var accumulator: UInt32 = 0
        var count = 0
        var sawPadding = false
        let table = Self.table  // one lazy-global check, not one per byte
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "="):
                sawPadding = true
                continue
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"):
                continue
            default:
                break
            }
            let value = table[Int(byte)]
            if value == 0xFF || sawPadding { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            count += 1
            if count == 4 {
                output.append(UInt8(truncatingIfNeeded: accumulator >> 16))
                output.append(UInt8(truncatingIfNeeded: accumulator >> 8))
                output.append(UInt8(truncatingIfNeeded: accumulator))
                accumulator = 0
                count = 0
            }
        }
        switch count {
        case 0: break
        case 2: output.append(UInt8(truncatingIfNeeded: accumulator >> 4))
        case 3:
            output.append(UInt8(truncatingIfNeeded: accumulator >> 10))
            output.append(UInt8(truncatingIfNeeded: accumulator >> 2))
        default: return nil
        }
        return output
    }

    private static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Encodes as base64url without padding (JWS segments), a byte at a time: Foundation's
    /// string replacing made this a signing hot spot.
    public static func encodeURL<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let input = Array(bytes)
        var output = [UInt8]()
        output.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 2 < input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            output.append(urlAlphabet[Int(value >> 18 & 63)])
            output.append(urlAlphabet[Int(value >> 12 & 63)])
            output.append(urlAlphabet[Int(value >> 6 & 63)])
            output.append(urlAlphabet[Int(value & 63)])
            index += 3
        }
        let remaining = input.count - index
        if remaining > 0 {
            let value = UInt32(input[index]) << 16 | (remaining == 2 ? UInt32(input[index + 1]) << 8 : 0)
            output.append(urlAlphabet[Int(value >> 18 & 63)])
            output.append(urlAlphabet[Int(value >> 12 & 63)])
            if remaining == 2 { output.append(urlAlphabet[Int(value >> 6 & 63)]) }
        }
        return String(decoding: output, as: UTF8.self)
    }
}
