import Foundation

/// Every publisher Entitle serves, read from `Config/` and checked as a whole before use:
/// a wrong catalog fails at start with a message naming the bad entry.
public struct EntitlementCatalog: Sendable, Hashable, Codable {
    public var publishers: [Publisher]

    public init(publishers: [Publisher]) throws {
        self.publishers = publishers
        try validate()
    }

    /// Reads and checks a catalog document.
    public init(json data: Data) throws(CatalogError) {
        do {
            self = try JSONDecoder().decode(Self.self, from: data)
        } catch let DecodingError.keyNotFound(key, context) {
            throw .invalidEntry(entry: Self.path(context.codingPath), problem: "\(key.stringValue) is missing")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            throw .invalidEntry(entry: Self.path(context.codingPath), problem: "has the wrong type")
        } catch let DecodingError.dataCorrupted(context) {
            throw .invalidEntry(entry: Self.path(context.codingPath), problem: context.debugDescription)
        } catch {
            throw .unreadable("\(error)")
        }
        try validate()
    }

    public func publisher(_ id: String) -> Publisher? { publishers.first { $0.id == id } }

    /// Checks what the handlers rely on, naming the first bad entry.
    public func validate() throws(CatalogError) {
        var publisherIds = Set<String>()
        // A bundle id names one app of one publisher: its notifications and purchases must
        // have one home.
        var appHomes: [String: String] = [:]
        for publisher in publishers {
            let name = "publisher \"\(publisher.id)\""
            guard Self.isIdentifier(publisher.id), publisherIds.insert(publisher.id).inserted else {
                throw .invalidEntry(entry: name, problem: "ids must be unique, 1-64 letters, digits, '-' or '_'")
            }
            guard !publisher.apps.isEmpty else { throw .invalidEntry(entry: name, problem: "has no apps") }
            var bundleIds = Set<String>()
            for app in publisher.apps {
                let appName = "\(name) app \"\(app.bundleId)\""
                guard !app.bundleId.isEmpty, bundleIds.insert(app.bundleId).inserted else {
                    throw .invalidEntry(entry: appName, problem: "bundle ids must be unique and not empty")
                }
                if let other = appHomes.updateValue(publisher.id, forKey: app.bundleId), other != publisher.id {
                    throw .invalidEntry(
                        entry: appName,
                        problem: "bundle id \(app.bundleId) is also an app of publisher \"\(other)\"; an app belongs to one publisher")
                }
                guard !app.environments.isEmpty, app.environments.allSatisfy(["Production", "Sandbox"].contains) else {
                    throw .invalidEntry(entry: appName, problem: "environments must name Production and/or Sandbox")
                }
                if app.environments.contains("Production"), app.appAppleId == nil {
                    throw .invalidEntry(entry: appName, problem: "production apps need their appAppleId")
                }
            }
            var offerIds = Set<String>()
            var products: [String: String] = [:]
            for offer in publisher.offers {
                let offerName = "\(name) offer \"\(offer.offerId)\""
                guard Self.isIdentifier(offer.offerId), offerIds.insert(offer.offerId).inserted else {
                    throw .invalidEntry(entry: offerName, problem: "offer ids must be unique, 1-64 letters, digits, '-' or '_'")
                }
                guard !offer.productIds.isEmpty else { throw .invalidEntry(entry: offerName, problem: "maps no App Store product") }
                for product in offer.productIds {
                    if let other = products.updateValue(offer.offerId, forKey: product) {
                        throw .invalidEntry(entry: offerName, problem: "product \(product) is already mapped to offer \"\(other)\"")
                    }
                }
                if let credits = offer.credits, !(1...1_000_000_000).contains(credits) {
                    throw .invalidEntry(entry: offerName, problem: "credits must be 1 to 1000000000")
                }
                if let days = offer.accessDays, days <= 0 {
                    throw .invalidEntry(entry: offerName, problem: "accessDays must be positive")
                }
                guard offer.credits != nil || !offer.entitlements.isEmpty else {
                    throw .invalidEntry(entry: offerName, problem: "grants neither entitlements nor credits")
                }
            }
            for group in publisher.subscriptionGroups {
                for (product, level) in group.levels where products[product] == nil || level < 1 {
                    throw .invalidEntry(
                        entry: "\(name) subscription group \"\(group.id)\"", problem: "\(product) needs an offer and a level of 1 or more")
                }
            }
            var codes = Set<String>()
            for campaign in publisher.couponCampaigns {
                let entry = "\(name) coupon \"\(campaign.code)\""
                guard !campaign.code.isEmpty, campaign.code.count <= 64, codes.insert(campaign.code).inserted else {
                    throw .invalidEntry(entry: entry, problem: "codes must be unique, 1-64 characters")
                }
                guard offerIds.contains(campaign.offerId) else {
                    throw .invalidEntry(entry: entry, problem: "names no offer \"\(campaign.offerId)\"")
                }
                guard campaign.freePeriod == nil || campaign.introductoryPrice == nil else {
                    throw .invalidEntry(entry: entry, problem: "grants either a freePeriod or an introductoryPrice, not both")
                }
                if let period = campaign.freePeriod, !Self.isPeriod(period) {
                    throw .invalidEntry(entry: entry, problem: "freePeriod must be an ISO 8601 period such as P1W or P1M")
                }
                if let price = campaign.introductoryPrice {
                    guard PurchaseFact.price(reported: price) == price else {
                        throw .invalidEntry(entry: entry, problem: "introductoryPrice must be decimal text such as 4.99")
                    }
                    guard campaign.currency.flatMap(PurchaseFact.currency(reported:)) == campaign.currency, campaign.currency != nil else {
                        throw .invalidEntry(entry: entry, problem: "an introductoryPrice needs its currency (ISO 4217, such as USD)")
                    }
                }
                if let cycles = campaign.billingCycles, !(1...120).contains(cycles) {
                    throw .invalidEntry(entry: entry, problem: "billingCycles must be 1 to 120")
                }
            }
            if let namespace = publisher.appAccountTokenNamespace, UUID(uuidString: namespace) == nil {
                throw .invalidEntry(entry: "\(name) appAccountTokenNamespace", problem: "\(namespace) is not a UUID")
            }
            guard (60...31_536_000).contains(publisher.proofMaxAgeSeconds) else {
                throw .invalidEntry(entry: "\(name) proofMaxAgeSeconds", problem: "must be 60 to 31536000 (a year)")
            }
            if let api = publisher.api { try Self.validate(api, of: publisher, name: name) }
            if let webhook = publisher.webhook {
                guard let url = URL(string: webhook.url), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
                    throw .invalidEntry(entry: "\(name) webhook", problem: "\(webhook.url) is not an http(s) URL")
                }
                for type in webhook.events ?? []
                where LifecycleEventType(rawValue: type) == nil && !Publisher.Webhook.appEvents.contains(type) {
                    throw .invalidEntry(
                        entry: "\(name) webhook events",
                        problem: "\(type) is not an event type (\(LifecycleEventType.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
            }
            if let zone = publisher.timeZone, TimeZone(identifier: zone) == nil {
                throw .invalidEntry(entry: "\(name) timeZone", problem: "\(zone) is not a time zone name (such as Europe/Paris)")
            }
            if let policy = publisher.consumption {
                if let offers = policy.offers, let unknown = offers.first(where: { publisher.offer($0) == nil }) {
                    throw .invalidEntry(entry: "\(name) consumption.offers", problem: "names no offer \(unknown)")
                }
            }
            if let push = publisher.push {
                guard (1...100).contains(push.maxDevicesPerCustomer) else {
                    throw .invalidEntry(entry: "\(name) push maxDevicesPerCustomer", problem: "must be 1 to 100")
                }
                if let key = push.key, key.keyId.isEmpty || key.teamId.isEmpty || key.privateKeyVariable.isEmpty {
                    throw .invalidEntry(entry: "\(name) push key", problem: "needs keyId, teamId and privateKeyVariable")
                }
            }
            guard (0...168).contains(publisher.temporaryAccessHours) else {
                throw .invalidEntry(entry: "\(name) temporaryAccessHours", problem: "must be 0 (never) to 168 (a week)")
            }
            guard publisher.reconcileIntervalSeconds == 0 || (300...86_400).contains(publisher.reconcileIntervalSeconds) else {
                throw .invalidEntry(entry: "\(name) reconcileIntervalSeconds", problem: "must be 0 (never) or 300 to 86400")
            }
            guard (30...3_660).contains(publisher.eventRetentionDays) else {
                throw .invalidEntry(entry: "\(name) eventRetentionDays", problem: "must be 30 to 3660 days")
            }
        }
    }

    /// The API access entry: app keys name the publisher's apps, customer-token keys are complete.
    static func validate(_ api: Publisher.APIAccess, of publisher: Publisher, name: String) throws(CatalogError) {
        if let rate = api.rateLimit, !(rate.perSecond.isFinite && rate.perSecond > 0 && rate.burst >= 1) {
            throw .invalidEntry(entry: "\(name) rateLimit", problem: "perSecond must be above 0 and burst at least 1")
        }
        if let wait = api.validation?.waitSeconds, !(0...60).contains(wait) {
            throw .invalidEntry(entry: "\(name) validation", problem: "waitSeconds must be 0 to 60")
        }
        var keyIds = Set<String>()
        for key in api.appKeys {
            let keyName = "\(name) app key \"\(key.id)\""
            guard isIdentifier(key.id), keyIds.insert(key.id).inserted else {
                throw .invalidEntry(entry: keyName, problem: "app key ids must be unique, 1-64 letters, digits, '-' or '_'")
            }
            guard !key.variable.isEmpty else { throw .invalidEntry(entry: keyName, problem: "names no variable") }
            if let unknown = key.bundleIds.first(where: { publisher.app(bundleId: $0) == nil }) {
                throw .invalidEntry(entry: keyName, problem: "names \(unknown), which is not an app of the publisher")
            }
        }
        guard let tokens = api.customerTokens else { return }
        guard !tokens.keys.isEmpty else { throw .invalidEntry(entry: "\(name) customerTokens", problem: "has no keys") }
        guard (60...86_400).contains(tokens.maxLifetimeSeconds) else {
            throw .invalidEntry(entry: "\(name) customerTokens", problem: "maxLifetimeSeconds must be 60 to 86400")
        }
        var kids = Set<String>()
        for key in tokens.keys {
            let keyName = "\(name) customer token key \"\(key.kid)\""
            guard !key.kid.isEmpty, key.kid.utf8.count <= 64, kids.insert(key.kid).inserted else {
                throw .invalidEntry(entry: keyName, problem: "kids must be unique, 1 to 64 bytes")
            }
            switch key.algorithm {
            case .HS256 where key.secretVariable?.isEmpty ?? true:
                throw .invalidEntry(entry: keyName, problem: "HS256 keys name their secretVariable")
            case .ES256 where key.publicKey?.isEmpty ?? true:
                throw .invalidEntry(entry: keyName, problem: "ES256 keys carry their publicKey (PEM)")
            default: break
            }
        }
    }

    /// `P` then a count and one of D, W, M, Y (`P1W`, `P3M`).
    static func isPeriod(_ text: String) -> Bool {
        let body = text.dropFirst()
        guard text.hasPrefix("P"), let unit = body.last, "DWMY".contains(unit) else { return false }
        let count = body.dropLast()
        return (1...3).contains(count.count) && count.allSatisfy { $0.isASCII && $0.isNumber } && count != "0" && !count.hasPrefix("0")
    }

    static func isIdentifier(_ text: String) -> Bool {
        (1...64).contains(text.count)
            && text.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "-" || $0 == "_" }
    }

    static func path(_ codingPath: [any CodingKey]) -> String {
        codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            .replacingOccurrences(of: ".[", with: "[")
    }
}
