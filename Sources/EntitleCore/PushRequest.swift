import APNs
import Foundation

/// A push a publisher asked for (`POST /v1/pushes`, `entitle push`): what goes to each
/// device, to whom, and whether it is promotional.
package struct PushRequest: Sendable, Hashable, Codable {
    /// Who gets it: customers entitled to an entitlement or an offer when it is sent, one
    /// customer, or a list.
    package enum Audience: Sendable, Hashable, Codable {
        case entitlement(String)
        case offer(String)
        case customer(String)
        case customers([String])

        enum CodingKeys: String, CodingKey { case entitlement, offerId, customer, customers }

        package init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            if let name = try container.decodeIfPresent(String.self, forKey: .entitlement) {
                self = .entitlement(name)
            } else if let offer = try container.decodeIfPresent(String.self, forKey: .offerId) {
                self = .offer(offer)
            } else if let customer = try container.decodeIfPresent(String.self, forKey: .customer) {
                self = .customer(customer)
            } else {
                self = .customers(try container.decode([String].self, forKey: .customers))
            }
        }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .entitlement(let name): try container.encode(name, forKey: .entitlement)
            case .offer(let offer): try container.encode(offer, forKey: .offerId)
            case .customer(let customer): try container.encode(customer, forKey: .customer)
            case .customers(let customers): try container.encode(customers, forKey: .customers)
            }
        }

        /// Whether each customer's access is checked when their batch is sent (a named
        /// customer is the publisher's choice).
        package var followsAccess: Bool {
            switch self {
            case .entitlement, .offer: true
            case .customer, .customers: false
            }
        }
    }

    package var push: APNsPush
    package var audience: Audience
    /// Marketing: only devices whose customer opted in get it.
    package var promotional: Bool

    package init(push: APNsPush, audience: Audience, promotional: Bool) {
        self.push = push
        self.audience = audience
        self.promotional = promotional
    }

    /// Whether `device` may get this push: the app, a kind of token that takes it (a VoIP
    /// token takes VoIP pushes only), and the opt-in for a promotional push.
    package func reaches(_ device: DeviceRegistry.Device) -> Bool {
        guard device.bundleId == push.bundleId, !promotional || device.promotional else { return false }
        return (device.pushType == .voip) == (push.pushType == .voip)
    }
}
