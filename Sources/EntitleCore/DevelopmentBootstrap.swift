import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import X509

/// What development mode asks of the simulator before the configuration is complete: its
/// signing root (the only one trusted then), the apps' shared secrets, and an App Store
/// Server API key of this run's own for each app that names none. Only the configuration
/// loader in development calls it; production never reaches a simulator.
package struct DevelopmentBootstrap: Sendable {
    let simulatorURL: String
    let httpClient: HTTPClient

    /// The root the simulator signs with.
    func signingRoot() async throws -> Certificate { try await certificate(simulatorURL + "/simulator/root.cer") }

    /// The root the simulator signs app receipts with.
    func receiptRoot() async throws -> Certificate { try await certificate(simulatorURL + "/simulator/receipt-root.cer") }

    /// Each simulated app's shared secret, by bundle id.
    func sharedSecrets() async throws -> [String: Secret] {
        struct SimulatorApp: Decodable {
            var bundleId: String
            var sharedSecret: String?
        }
        var secrets: [String: Secret] = [:]
        for app in try JSONDecoder().decode([SimulatorApp].self, from: Data(try await get(simulatorURL + "/simulator/apps"))) {
            secrets[app.bundleId] = app.sharedSecret.map(Secret.init)
        }
        return secrets
    }

    /// A key of this run's own for `bundleId`, registered with the simulator.
    func registerKey(bundleId: String) async throws -> (keyId: String, issuerId: String, pem: String) {
        let key = P256.Signing.PrivateKey()
        let keyId = "DEV" + UUID().uuidString.prefix(7).uppercased()
        let issuerId = "entitle-development"
        let registration = try JSONSerialization.data(withJSONObject: [
            "keyId": keyId, "issuerId": issuerId, "bundleId": bundleId, "publicKey": key.publicKey.pemRepresentation,
        ])
        _ = try await get(simulatorURL + "/simulator/keys", post: registration)
        return (keyId, issuerId, key.pemRepresentation)
    }

    /// Where the simulator's local APNs listens, and the CA its certificate chains to (PEM).
    func localAPNs() async throws -> (url: String, certificateAuthority: String) {
        struct LocalAPNs: Decodable {
            var url: String
            var certificateAuthority: String
        }
        do {
            let local = try JSONDecoder().decode(LocalAPNs.self, from: Data(try await get(simulatorURL + "/simulator/apns")))
            return (local.url, local.certificateAuthority)
        } catch let error as WorkerError {
            throw error
        } catch {
            throw WorkerError(.appleUnavailable, "the simulator's local APNs answer cannot be read: \(error)")
        }
    }

    /// An APNs key of this run's own for `topics` (bundle ids), registered with the local APNs.
    func registerAPNsKey(topics: [String]) async throws -> (keyId: String, teamId: String, pem: String) {
        let key = P256.Signing.PrivateKey()
        let keyId = "DEV" + UUID().uuidString.prefix(7).uppercased().replacingOccurrences(of: "-", with: "")
        let teamId = "DEVTEAM000"
        let registration = try JSONSerialization.data(withJSONObject: [
            "keyId": keyId, "teamId": teamId, "publicKeyPEM": key.publicKey.pemRepresentation, "topics": topics,
        ])
        _ = try await get(simulatorURL + "/simulator/apns/keys", post: registration)
        return (keyId, teamId, key.pemRepresentation)
    }

    func certificate(_ url: String) async throws -> Certificate {
        do {
            return try Certificate(derEncoded: try await get(url))
        } catch let error as WorkerError {
            throw error
        } catch {
            throw WorkerError(.appleUnavailable, "\(url) did not serve a certificate: \(error)")
        }
    }

    func get(_ url: String, post body: Data? = nil) async throws -> [UInt8] {
        var request = HTTPClientRequest(url: url)
        if let body {
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        do {
            let response = try await httpClient.execute(request, timeout: .seconds(10))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            guard (200..<300).contains(response.status.code) else {
                throw WorkerError(.appleUnavailable, "\(url) answered \(response.status.code)")
            }
            return Array(bytes.readableBytesView)
        } catch let error as WorkerError {
            throw error
        } catch {
            throw WorkerError(
                .appleUnavailable, "the simulator at \(url) cannot be reached (is `entitle simulator` running?): \(error)")
        }
    }
}
