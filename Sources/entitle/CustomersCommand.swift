import ArgumentParser
import EntitleCore
import Entitlements
import Foundation
import RedisClient

/// `entitle customers show CUSTOMER --publisher P [--at ISO8601] [--json]`.
struct CustomersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "customers", abstract: "Inspect customers' entitlements; bind a purchase to a customer's appAccountToken.",
        subcommands: [Show.self, SetAppAccountToken.self, Resync.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a customer's entitlements, subscriptions and credits (now, or at a past date from history).")

        @OptionGroup var options: RedisOptions

        @Argument(help: "The customer id (an email, a username or an appAccountToken, as the publisher names customers).")
        var customer: String

        @Option(help: "The publisher id.")
        var publisher: String

        @Option(help: "Answer as of this time (ISO 8601), from history.")
        var at: String?

        @Flag(help: "Print JSON.")
        var json = false

        func run() async throws {
            let date =
                try at.map { text -> Date in
                    guard let date = try? Date(text, strategy: .iso8601) else {
                        throw ValidationError("--at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, not \"\(text)\"")
                    }
                    return date
                } ?? Date()
            let logger = options.makeLogger("entitle.customers")
            let pool = RedisConnectionPool(
                configuration: try RedisConfiguration(url: options.redisURL), maximumConnections: 1, logger: logger)
            defer { pool.close() }
            let store = EntitlementStore(redis: pool, prefix: options.keyPrefix, logger: logger)
            let (state, version) = try await store.load(publisher: publisher, customer: customer)
            guard version > 0 else {
                // An appAccountToken is stored in lower case (`Publisher.canonicalCustomerId`); this
                // command reads no catalog, so it says so rather than guess the publisher's kind of id.
                let lower = customer.lowercased()
                let hint =
                    UUID(uuidString: customer) != nil && lower != customer ? " (an appAccountToken is kept in lower case: \(lower))" : ""
                throw CommandFailure("no customer \(customer) of publisher \(publisher)\(hint)")
            }
            if json {
                print(try JSONOutput.line(encoding: CustomerDocument(state, at: date)))
            } else {
                print(Self.text(state, at: date))
            }
        }

        static func text(_ state: CustomerEntitlements, at date: Date) -> String {
            var lines = [
                "customer:      \(state.customer) (publisher \(state.publisher))",
                "at:            \(date.formatted(.iso8601))",
                "entitlements:  \(state.entitlements(at: date).joined(separator: ", "))",
                "credits:       \(state.credits.balance(at: date))",
            ]
            for subscription in state.subscriptions(at: date) {
                lines.append(
                    "subscription:  \(subscription.originalTransactionId) \(subscription.offerId) \(subscription.status.rawValue)"
                        + (subscription.expiresDate.map { " until \($0.formatted(.iso8601))" } ?? ""))
            }
            return lines.joined(separator: "\n")
        }
    }
}
