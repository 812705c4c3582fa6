import Foundation

/// Where a webhook may be delivered. A publisher's URL is resolved before each delivery, and
/// every address it resolves to must be public: loopback, private (RFC 1918, unique local),
/// link-local (with the cloud metadata address 169.254.169.254), carrier-grade NAT,
/// multicast and reserved ranges are refused, unless the deployment allows them
/// (development does). The delivery then connects to the address that was checked, so a
/// name that resolves elsewhere a moment later changes nothing.
package struct WebhookDestination: Sendable, Hashable {
    package let host: String
    /// The checked address the delivery connects to (textual IPv4 or IPv6).
    package let address: String

    /// Why a destination is refused.
    package struct Refusal: Error, Sendable, Hashable, CustomStringConvertible {
        package let description: String
    }

    /// Resolves `url`'s host and checks every address it has.
    package static func resolve(_ url: String, allowPrivate: Bool) async throws(Refusal) -> WebhookDestination {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "http" || scheme == "https", var host = components.host, !host.isEmpty
        else { throw Refusal(description: "\(url) is not an http(s) URL") }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let addresses = try await lookup(host)
        guard let first = addresses.first else { throw Refusal(description: "\(host) has no address") }
        if !allowPrivate, let refused = addresses.first(where: { !isPublic($0) }) {
            throw Refusal(
                description: "\(host) resolves to \(text(refused)), which is not a public address; webhooks go to public addresses only")
        }
        return WebhookDestination(host: host, address: text(first))
    }

    // MARK: Addresses

    /// An address as 4 (IPv4) or 16 (IPv6) bytes.
    package typealias Bytes = [UInt8]

    /// Whether an address is on the public internet (by IANA's special-purpose registries).
    package static func isPublic(_ address: Bytes) -> Bool {
        if address.count == 4 { return isPublicIPv4(address) }
        guard address.count == 16 else { return false }
        // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96)
        // addresses reach an IPv4 address: judge that one.
        if address[0..<10].allSatisfy({ $0 == 0 }) && address[10] == 0xFF && address[11] == 0xFF {
            return isPublicIPv4(Array(address[12...]))
        }
        if address[0..<12].allSatisfy({ $0 == 0 }) { return false }  // ::, ::1, ::a.b.c.d
        if address[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] { return isPublicIPv4(Array(address[12...])) }
        let first = address[0]
        if first & 0xFE == 0xFC { return false }  // fc00::/7 unique local
        if first == 0xFE && address[1] & 0xC0 == 0x80 { return false }  // fe80::/10 link-local
        if first == 0xFE && address[1] & 0xC0 == 0xC0 { return false }  // fec0::/10 site-local (deprecated)
        if first == 0xFF { return false }  // multicast
        if address[0] == 0x20 && address[1] == 0x01 && address[2] == 0x0D && address[3] == 0xB8 { return false }  // documentation
        if address[0] == 0x01 && address[1] == 0x00 && address[2..<8].allSatisfy({ $0 == 0 }) { return false }  // 100::/64 discard
        return true
    }

    static func isPublicIPv4(_ a: Bytes) -> Bool {
        guard a.count == 4 else { return false }
        switch (a[0], a[1]) {
        case (0, _), (10, _), (127, _): return false  // this network, private, loopback
        case (100, 64...127): return false  // carrier-grade NAT
        case (169, 254): return false  // link-local, cloud metadata
        case (172, 16...31): return false  // private
        case (192, 168): return false  // private
        case (192, 0) where a[2] == 0 || a[2] == 2: return false  // IETF protocol, documentation
        case (198, 18...19): return false  // benchmarking
        case (198, 51) where a[2] == 100: return false  // documentation
        case (203, 0) where a[2] == 113: return false  // documentation
        case (224...255, _): return false  // multicast, reserved, broadcast
        default: return true
        }
    }

    static func text(_ address: Bytes) -> String {
        if address.count == 4 { return address.map(String.init).joined(separator: ".") }
        var groups: [String] = []
        for index in stride(from: 0, to: address.count - 1, by: 2) {
            groups.append(String(UInt16(address[index]) << 8 | UInt16(address[index + 1]), radix: 16))
        }
        return groups.joined(separator: ":")
    }

    /// The host's addresses: the host itself when it is an IP literal, else getaddrinfo's
    /// answer, looked up on a Dispatch thread (it blocks, and must not hold a cooperative one).
    static func lookup(_ host: String) async throws(Refusal) -> [Bytes] {
        if let literal = literal(host) { return [literal] }
        let result: Result<[Bytes], Refusal> = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: resolveBlocking(host)) }
        }
        return try result.get()
    }

    package static func literal(_ host: String) -> Bytes? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    private static func resolveBlocking(_ host: String) -> Result<[Bytes], Refusal> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0 else {
            return .failure(Refusal(description: "\(host) cannot be resolved: \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(list) }
        var addresses: [Bytes] = []
        var entry = list
        while let current = entry?.pointee {
            if let socketAddress = current.ai_addr {
                switch current.ai_family {
                case AF_INET:
                    var address = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                    addresses.append(withUnsafeBytes(of: &address) { Array($0) })
                case AF_INET6:
                    var address = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                    addresses.append(withUnsafeBytes(of: &address) { Array($0) })
                default: break
                }
            }
            entry = current.ai_next
        }
        return .success(addresses)
    }
}
