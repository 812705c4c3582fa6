import CZlib

/// Raw deflate (RFC 1951, no zlib or gzip header) with a preset dictionary, one call each
/// way. A small document shares little with itself; primed with a dictionary of what such
/// documents usually say, deflate finds most of it there.
package enum Deflate {
    /// A failure of zlib's: a document that does not inflate, or zlib out of memory.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// 8 KB windows: documents repeat themselves within a few hundred bytes (one renewal's
    /// transaction is mostly the one before), and a smaller window is cheaper to set up.
    static let windowBits: Int32 = 13
    static let memoryLevel: Int32 = 6

    /// `input` deflated at `level` (1 fastest to 9 smallest), primed with `dictionary`.
    package static func compress(_ input: [UInt8], dictionary: [UInt8], level: Int32 = 6) throws -> [UInt8] {
        var stream = z_stream()
        var status = deflateInit2_(
            &stream, level, Z_DEFLATED, -windowBits, memoryLevel, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw Failure(description: "deflate cannot start (zlib \(status))") }
        defer { deflateEnd(&stream) }
        if !dictionary.isEmpty {
            status = dictionary.withUnsafeBufferPointer { deflateSetDictionary(&stream, $0.baseAddress, uInt($0.count)) }
            guard status == Z_OK else { throw Failure(description: "deflate refused its dictionary (zlib \(status))") }
        }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(input.count))))
        let written = try input.withUnsafeBufferPointer { source in
            try output.withUnsafeMutableBufferPointer { target in
                stream.next_in = UnsafeMutablePointer(mutating: source.baseAddress)
                stream.avail_in = uInt(source.count)
                stream.next_out = target.baseAddress
                stream.avail_out = uInt(target.count)
                let status = deflate(&stream, Z_FINISH)
                guard status == Z_STREAM_END else { throw Failure(description: "deflate did not finish (zlib \(status))") }
                return target.count - Int(stream.avail_out)
            }
        }
        output.removeLast(output.count - written)
        return output
    }

    /// `input` inflated with the `dictionary` it was deflated with; refused past `limit`
    /// bytes, so a corrupt length cannot take the process's memory.
    package static func decompress(_ input: [UInt8], dictionary: [UInt8], limit: Int = 64 << 20) throws -> [UInt8] {
        var stream = z_stream()
        var status = inflateInit2_(&stream, -windowBits, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw Failure(description: "inflate cannot start (zlib \(status))") }
        defer { inflateEnd(&stream) }
        if !dictionary.isEmpty {
            // A raw stream takes its dictionary before the first byte.
            status = dictionary.withUnsafeBufferPointer { inflateSetDictionary(&stream, $0.baseAddress, uInt($0.count)) }
            guard status == Z_OK else { throw Failure(description: "inflate refused its dictionary (zlib \(status))") }
        }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: max(4096, input.count * 4))
        try input.withUnsafeBufferPointer { source in
            stream.next_in = UnsafeMutablePointer(mutating: source.baseAddress)
            stream.avail_in = uInt(source.count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { target in
                    stream.next_out = target.baseAddress
                    stream.avail_out = uInt(target.count)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, target.count - Int(stream.avail_out))
                }
                output.append(contentsOf: chunk[..<produced])
                guard output.count <= limit else { throw Failure(description: "the document inflates past \(limit) bytes") }
                if status == Z_STREAM_END { return }
                // Z_BUF_ERROR: no progress was possible, so the stream was cut short.
                guard status == Z_OK else { throw Failure(description: "the document does not inflate (zlib \(status))") }
            }
        }
        return output
    }
}
