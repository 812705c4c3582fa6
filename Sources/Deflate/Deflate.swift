import CZlib

/// Deflate in zlib's format (RFC 1950: a two-byte header, the dictionary's Adler-32 and the
/// data's, so a damaged document or another dictionary is an error, never other data) with a
/// preset dictionary, one call each way. A small document shares little with itself; primed
/// with a dictionary of what such documents usually say, deflate finds most of it there.
package enum Deflate {
    /// A failure of zlib's: a document that does not inflate, or zlib out of memory.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String

        package init(description: String) { self.description = description }
    }

    /// 8 KB windows: documents repeat themselves within a few hundred bytes (one renewal's
    /// transaction is mostly the one before), and a smaller window is cheaper to set up.
    static let windowBits: Int32 = 13
    static let memoryLevel: Int32 = 6

    /// `input` deflated at `level` (1 fastest to 9 smallest), primed with `dictionary`.
    package static func compress(_ input: [UInt8], dictionary: [UInt8], level: Int32 = 6) throws -> [UInt8] {
        // zlib keeps the stream's address and checks it on every call: it must not move.
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        var status = deflateInit2_(
            stream, level, Z_DEFLATED, windowBits, memoryLevel, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw Failure(description: "deflate cannot start (zlib \(status))") }
        defer { deflateEnd(stream) }
        if !dictionary.isEmpty {
            status = dictionary.withUnsafeBufferPointer { deflateSetDictionary(stream, $0.baseAddress, uInt($0.count)) }
            guard status == Z_OK else { throw Failure(description: "deflate refused its dictionary (zlib \(status))") }
        }
        var output = [UInt8](repeating: 0, count: Int(deflateBound(stream, uLong(input.count))))
        let written = try input.withUnsafeBufferPointer { source in
            try output.withUnsafeMutableBufferPointer { target in
                stream.pointee.next_in = UnsafeMutablePointer(mutating: source.baseAddress)
                stream.pointee.avail_in = uInt(source.count)
                stream.pointee.next_out = target.baseAddress
                stream.pointee.avail_out = uInt(target.count)
                let status = deflate(stream, Z_FINISH)
                guard status == Z_STREAM_END else { throw Failure(description: "deflate did not finish (zlib \(status))") }
                return target.count - Int(stream.pointee.avail_out)
            }
        }
        output.removeLast(output.count - written)
        return output
    }

    /// `input` inflated with the `dictionary` it was deflated with; refused past `limit`
    /// bytes (a damaged length cannot take the process's memory), with bytes after its end,
    /// or when its checksums do not hold.
    package static func decompress(_ input: [UInt8], dictionary: [UInt8], limit: Int = 64 << 20) throws -> [UInt8] {
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        defer { stream.deallocate() }
        let status = inflateInit2_(stream, windowBits, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { throw Failure(description: "inflate cannot start (zlib \(status))") }
        defer { inflateEnd(stream) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: max(4096, input.count * 4))
        try input.withUnsafeBufferPointer { source in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: source.baseAddress)
            stream.pointee.avail_in = uInt(source.count)
            while true {
                var (status, produced) = chunk.withUnsafeMutableBufferPointer { target in
                    stream.pointee.next_out = target.baseAddress
                    stream.pointee.avail_out = uInt(target.count)
                    let status = inflate(stream, Z_NO_FLUSH)
                    return (status, target.count - Int(stream.pointee.avail_out))
                }
                if status == Z_NEED_DICT {
                    // The header names the dictionary by its Adler-32: zlib refuses another.
                    let set = dictionary.withUnsafeBufferPointer { inflateSetDictionary(stream, $0.baseAddress, uInt($0.count)) }
                    guard set == Z_OK else { throw Failure(description: "the document was deflated with another dictionary") }
                    (status, produced) = (Z_OK, 0)
                }
                output.append(contentsOf: chunk[..<produced])
                guard output.count <= limit else { throw Failure(description: "the document inflates past \(limit) bytes") }
                if status == Z_STREAM_END {
                    guard stream.pointee.avail_in == 0 else { throw Failure(description: "the document has bytes after its end") }
                    return
                }
                // Z_BUF_ERROR: no progress was possible, so the stream was cut short;
                // Z_DATA_ERROR: damaged data or a checksum that does not hold.
                guard status == Z_OK else { throw Failure(description: "the document does not inflate (zlib \(status))") }
            }
        }
        return output
    }
}
