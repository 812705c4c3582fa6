/// Why the entitlement store could not do what was asked.
package struct EntitlementStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    package struct Code: RawRepresentable, Sendable, Hashable {
        package let rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }

        /// A stored document cannot be read (written by a newer version, or damaged).
        package static let unreadable = Code(rawValue: "unreadable")
        /// Too many concurrent writers changed the customer meanwhile; retry the job.
        package static let contended = Code(rawValue: "contended")
        /// The job's per-transaction lock passed to a later job, which already wrote.
        package static let fenced = Code(rawValue: "fenced")
        /// Another customer claimed a purchase this write was claiming (`update(claiming:)`);
        /// nothing was written, and the claim is to be decided again.
        package static let claimTaken = Code(rawValue: "claimTaken")
    }

    package let code: Code
    package let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { "\(code.rawValue): \(message)" }
}
