import Foundation

/// A publisher: its apps, what it sells, and its rules.
public struct Publisher: Sendable, Hashable, Codable {
    /// An app of the publisher on the App Store. Secrets are named, never stored: the
    /// variables hold them at run time.
    public struct App: Sendable, Hashable, Codable {
        public struct APIKey: Sendable, Hashable, Codable {
            public var keyId: String
            public var issuerId: String
            /// The environment variable holding the `.p8` key (PEM).
            public var privateKeyVariable: String
        }

        public var bundleId: String
        public var appAppleId: Int64?
        /// `Production`, `Sandbox`: where purchases are accepted from.
        public var environments: [String]
        /// The environment variable holding the app-specific shared secret (verifyReceipt).
        public var sharedSecretVariable: String?
        public var apiKey: APIKey?
        /// Call Apple's Finish Transaction once a consumable's credits are granted, so the app
        /// does not see it again (off unless set; needs `apiKey`).
        public var finishTransactions: Bool?
    }

    /// Push to the publisher's customers through APNs: its key (token-based authentication)
    /// and how many devices a customer keeps.
    public struct Push: Sendable, Hashable, Codable {
        public struct Key: Sendable, Hashable, Codable {
            /// The key's ten-character id (`kid`).
            public var keyId: String
            /// The team's ten-character id (`iss`).
            public var teamId: String
            /// The environment variable holding the `.p8` key (PEM).
            public var privateKeyVariable: String
        }

        /// `nil` in development only: a key of the run's own is registered with the local APNs.
        public var key: Key?
        /// Devices kept per customer; the oldest registration is dropped past it. 20 unless set.
        public var maxDevicesPerCustomer: Int

        public static let defaultMaxDevicesPerCustomer = 20

        public init(key: Key? = nil, maxDevicesPerCustomer: Int = Self.defaultMaxDevicesPerCustomer) {
            self.key = key
            self.maxDevicesPerCustomer = maxDevicesPerCustomer
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            key = try container.decodeIfPresent(Key.self, forKey: .key)
            maxDevicesPerCustomer =
                try container.decodeIfPresent(Int.self, forKey: .maxDevicesPerCustomer) ?? Self.defaultMaxDevicesPerCustomer
        }
    }

    /// Subscription products of one App Store group, with their levels (1 is the highest).
    public struct SubscriptionGroup: Sendable, Hashable, Codable {
        public var id: String
        public var levels: [String: Int]
    }

    /// A coupon customers enter, matching an App Store offer code or introductory offer,
    /// and what it grants: a free period or an introductory price, for a number of billing
    /// cycles. Apple charges what it charges; the campaign says what the customer was promised.
    public struct CouponCampaign: Sendable, Hashable, Codable {
        public var code: String
        public var offerId: String
        /// The App Store offer code it corresponds to, when it is one (else the product's
        /// introductory offer).
        public var appleOfferCode: String?
        /// A free period, ISO 8601 (`P1W`, `P1M`).
        public var freePeriod: String?
        /// An introductory price per billing cycle, decimal text (`4.99`), in `currency`.
        public var introductoryPrice: String?
        public var currency: String?
        /// For how many billing cycles the free period or price lasts (1 when absent).
        public var billingCycles: Int?

        public init(
            code: String, offerId: String, appleOfferCode: String? = nil, freePeriod: String? = nil, introductoryPrice: String? = nil,
            currency: String? = nil, billingCycles: Int? = nil
        ) {
            self.code = code
            self.offerId = offerId
            self.appleOfferCode = appleOfferCode
            self.freePeriod = freePeriod
            self.introductoryPrice = introductoryPrice
            self.currency = currency
            self.billingCycles = billingCycles
        }
    }

    /// Where lifecycle events are posted, HMAC-signed with the secret the variable holds.
    public struct Webhook: Sendable, Hashable, Codable {
        public var url: String
        public var secretVariable: String
        /// The lifecycle event types to post (`LifecycleEventType` names); every type when absent.
        public var events: [String]?
        /// What a body's `type` says: `legacy` (the default: the seven names receivers built
        /// before the lifecycle events know, where one fits) or `lifecycle` (the lifecycle
        /// type's own name). `event` always carries the lifecycle name.
        public var typeNames: TypeNames?

        public enum TypeNames: String, Sendable, Hashable, Codable {
            case legacy, lifecycle
        }

        /// Whether events of this type are posted.
        public func posts(_ type: LifecycleEventType) -> Bool { posts(name: type.rawValue) }

        /// Whether events of this name are posted: a lifecycle type's, or one of `appEvents`.
        public func posts(name: String) -> Bool { events.map { $0.contains(name) } ?? true }

        /// Events about an app rather than a customer, posted like the lifecycle events:
        /// `consent_rescinded` (Apple's `RESCIND_CONSENT`).
        public static let appEvents: Set<String> = ["consent_rescinded"]
    }

    /// How the publisher's backend and apps reach the HTTP API. Secrets are named by the
    /// environment variables that hold them, never stored.
    public struct APIAccess: Sendable, Hashable, Codable {
        /// Cleeng-compatible `POST /apple/payment`: `X-Publisher-Token` is one of the
        /// publisher's tokens, and the Basic credentials (`user:password`) are these.
        public struct Cleeng: Sendable, Hashable, Codable {
            public var basicAuthVariable: String
        }

        /// A token bucket: `perSecond` requests on average, `burst` at once.
        public struct RateLimit: Sendable, Hashable, Codable {
            public var perSecond: Double
            public var burst: Int
        }

        /// What the Cloud Softphone-style `/v1/validate` answers in, and how long it waits.
        public struct Validation: Sendable, Hashable, Codable {
            public enum Format: String, Sendable, Hashable, Codable { case xml, json, form }
            public var format: Format?
            public var waitSeconds: Double?
        }

        /// A key an app ships with (public: an app cannot keep a secret). It may post purchases
        /// that carry Apple's proof, and read what its customer token allows; nothing else.
        public struct AppKey: Sendable, Hashable, Codable {
            /// Names the key in job records and logs; the key itself is in `variable`.
            public var id: String
            /// The environment variable (or `VARIABLE_FILE`) holding the key; several lines
            /// are several valid keys, to rotate them.
            public var variable: String
            /// The apps whose purchases it may post; empty: any of the publisher's apps.
            public var bundleIds: [String]

            public init(id: String, variable: String, bundleIds: [String] = []) {
                self.id = id
                self.variable = variable
                self.bundleIds = bundleIds
            }

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                id = try container.decode(String.self, forKey: .id)
                variable = try container.decode(String.self, forKey: .variable)
                bundleIds = try container.decodeIfPresent([String].self, forKey: .bundleIds) ?? []
            }
        }

        /// How the publisher's backend proves to Entitle which customer an app acts for: a
        /// short-lived JWT (`sub` the customer, `aud` the publisher id, `exp`) it signs with one
        /// of these keys and hands to its logged-in app (docs/api.md shows how).
        public struct CustomerTokens: Sendable, Hashable, Codable {
            public struct Key: Sendable, Hashable, Codable {
                public enum Algorithm: String, Sendable, Hashable, Codable { case HS256, ES256 }
                /// The JWT header's `kid`.
                public var kid: String
                public var algorithm: Algorithm
                /// HS256: the environment variable (or `VARIABLE_FILE`) holding the shared secret.
                public var secretVariable: String?
                /// ES256: the public key, PEM (public, so it may sit in the catalog).
                public var publicKey: String?
            }

            public var keys: [Key]
            /// The longest a token may live (`exp - iat`), in seconds; 3600 unless set.
            public var maxLifetimeSeconds: Int

            public init(from decoder: any Decoder) throws {
                let container = try decoder.container(keyedBy: CodingKeys.self)
                keys = try container.decode([Key].self, forKey: .keys)
                maxLifetimeSeconds = try container.decodeIfPresent(Int.self, forKey: .maxLifetimeSeconds) ?? 3600
            }
        }

        /// Variables each holding Bearer secret keys for `/v1/` (the publisher's backend);
        /// several variables, or several lines in one, to rotate them.
        public var tokenVariables: [String]
        /// Keys apps may ship with.
        public var appKeys: [AppKey]
        public var customerTokens: CustomerTokens?
        public var cleeng: Cleeng?
        public var rateLimit: RateLimit?
        public var validation: Validation?

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            tokenVariables = try container.decodeIfPresent([String].self, forKey: .tokenVariables) ?? []
            appKeys = try container.decodeIfPresent([AppKey].self, forKey: .appKeys) ?? []
            customerTokens = try container.decodeIfPresent(CustomerTokens.self, forKey: .customerTokens)
            cleeng = try container.decodeIfPresent(Cleeng.self, forKey: .cleeng)
            rateLimit = try container.decodeIfPresent(RateLimit.self, forKey: .rateLimit)
            validation = try container.decodeIfPresent(Validation.self, forKey: .validation)
        }
    }

    /// How customers are named on this publisher's road.
    public enum CustomerIdentity: String, Sendable, Hashable, Codable {
        case email, username, appAccountToken
    }

    public var id: String
    public var name: String?
    public var customerIdentity: CustomerIdentity
    public var transferPolicy: TransferPolicy
    public var apps: [App]
    public var offers: [Offer]
    public var subscriptionGroups: [SubscriptionGroup]
    public var couponCampaigns: [CouponCampaign]
    public var webhook: Webhook?
    public var api: APIAccess?
    /// The UUID namespace from which each customer's `appAccountToken` is derived
    /// (UUIDv5 of the customer id), when the publisher's apps set it that way.
    public var appAccountTokenNamespace: String?
    /// How recently Apple must have signed the proof an app posts (a signed transaction's
    /// `signedDate`, an app receipt's creation date) for its claim to take a purchase another
    /// customer holds, in seconds; `ClaimRule` says when it applies. 86400 (a day) unless set.
    public var proofMaxAgeSeconds: Int

    /// A day: StoreKit signs again what a device holds each time it syncs with the App Store.
    public static let defaultProofMaxAgeSeconds = 86_400
    /// The time zone the reports' days are counted in (IANA name); UTC unless set.
    public var timeZone: String?
    /// How long the event log keeps each raw event, in days (30 to 3660); the reports keep
    /// their figures after. 400 unless set.
    public var eventRetentionDays: Int

    public static let defaultEventRetentionDays = 400
    /// Whether and how Entitle answers Apple's `CONSUMPTION_REQUEST`s; unanswered when absent.
    public var consumption: ConsumptionPolicy?
    /// How often the worker reconciles the publisher's notifications with Apple's
    /// Notification History, in seconds (0: never; 300 to 86400 otherwise). 3600 unless set.
    public var reconcileIntervalSeconds: Int

    public static let defaultReconcileIntervalSeconds = 3600
    /// How long access may be granted from a signed transaction verified here while Apple
    /// cannot be asked about the subscription (its API down, slow or limiting), in hours
    /// (0: never; at most 168); never past the transaction's own expiry. 24 unless set.
    public var temporaryAccessHours: Int

    public static let defaultTemporaryAccessHours = 24
    /// Pushes to customers' devices; devices are not taken when absent.
    public var push: Push?

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        customerIdentity = try container.decodeIfPresent(CustomerIdentity.self, forKey: .customerIdentity) ?? .email
        transferPolicy = try container.decodeIfPresent(TransferPolicy.self, forKey: .transferPolicy) ?? .transfer
        apps = try container.decode([App].self, forKey: .apps)
        offers = try container.decode([Offer].self, forKey: .offers)
        subscriptionGroups = try container.decodeIfPresent([SubscriptionGroup].self, forKey: .subscriptionGroups) ?? []
        couponCampaigns = try container.decodeIfPresent([CouponCampaign].self, forKey: .couponCampaigns) ?? []
        webhook = try container.decodeIfPresent(Webhook.self, forKey: .webhook)
        api = try container.decodeIfPresent(APIAccess.self, forKey: .api)
        appAccountTokenNamespace = try container.decodeIfPresent(String.self, forKey: .appAccountTokenNamespace)
        proofMaxAgeSeconds = try container.decodeIfPresent(Int.self, forKey: .proofMaxAgeSeconds) ?? Self.defaultProofMaxAgeSeconds
        timeZone = try container.decodeIfPresent(String.self, forKey: .timeZone)
        eventRetentionDays = try container.decodeIfPresent(Int.self, forKey: .eventRetentionDays) ?? Self.defaultEventRetentionDays
        consumption = try container.decodeIfPresent(ConsumptionPolicy.self, forKey: .consumption)
        reconcileIntervalSeconds =
            try container.decodeIfPresent(Int.self, forKey: .reconcileIntervalSeconds) ?? Self.defaultReconcileIntervalSeconds
        temporaryAccessHours = try container.decodeIfPresent(Int.self, forKey: .temporaryAccessHours) ?? Self.defaultTemporaryAccessHours
        push = try container.decodeIfPresent(Push.self, forKey: .push)
    }

    public func app(bundleId: String) -> App? { apps.first { $0.bundleId == bundleId } }

    /// What is wrong with a customer id, as this publisher names customers (nil: nothing).
    public func customerIdProblem(_ id: String, field: String = "customer") -> String? {
        guard !id.isEmpty, id.utf8.count <= 256 else { return "\(field) must have 1 to 256 bytes" }
        guard !id.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return "\(field) contains control characters" }
        switch customerIdentity {
        case .email:
            let parts = id.split(separator: "@", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, parts[1].contains("."), !parts[1].hasPrefix("."), !parts[1].hasSuffix("."),
                !id.utf8.contains(0x20)
            else { return "\(field) must be an email address (publisher \(self.id) names customers by email)" }
        case .username:
            guard !id.contains(where: \.isWhitespace) else { return "\(field) must be a username without spaces" }
        case .appAccountToken:
            guard UUID(uuidString: id) != nil else { return "\(field) must be an appAccountToken (a UUID)" }
        }
        return nil
    }

    /// A customer id as this publisher's customers are stored: an appAccountToken in lower
    /// case, as Apple writes it (a UUID's letters mean the same in either case, and Swift's
    /// `UUID().uuidString` writes them upper case); any other id as given. Every id that
    /// comes in (a request, a customer token, an import) goes through it, so one customer is
    /// never two.
    public func canonicalCustomerId(_ id: String) -> String {
        guard customerIdentity == .appAccountToken, let token = UUID(uuidString: id) else { return id }
        return token.uuidString.lowercased()
    }

    /// The offer a product buys.
    public func offer(forProduct productId: String) -> Offer? { offers.first { $0.productIds.contains(productId) } }

    public func offer(_ offerId: String) -> Offer? { offers.first { $0.offerId == offerId } }

    /// The level of a subscription product in its group (1 is the highest).
    public func level(ofProduct productId: String) -> Int? {
        subscriptionGroups.lazy.compactMap { $0.levels[productId] }.first
    }
}
