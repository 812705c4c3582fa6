import Foundation

/// Reads the secrets a catalog names by variable: the environment variable `NAME`, or the
/// file that `NAME_FILE` names (how container platforms hand over secrets). Files are read
/// on every call, so a process that reads again (on SIGHUP) sees a rotated secret.
///
/// A value may hold several secrets, one a line: during a rotation, the old one and the new
/// one are both valid.
package struct SecretReader: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    package let environment: [String: String]

    package init(environment: [String: String]) { self.environment = environment }

    // The environment holds secrets: whatever prints a reader shows none of it.
    package var description: String { "SecretReader(<redacted>)" }
    package var debugDescription: String { description }
    package var customMirror: Mirror { Mirror(self, children: []) }

    /// The text of `variable` (surrounding white space removed); `nil` when unset or empty.
    package func text(_ variable: String) throws(SecretError) -> String? {
        if let path = environment[variable + "_FILE"], !path.isEmpty {
            let contents: String
            do {
                contents = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw SecretError(variable: variable, problem: "\(variable)_FILE names \(path), which cannot be read")
            }
            let trimmed = contents.trimmingCharacters(in: .whitespacesAndNewlines)
            return trimmed.isEmpty ? nil : trimmed
        }
        guard let value = environment[variable] else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? nil : trimmed
    }

    /// The whole value as one secret (a key in PEM, `user:password`).
    package func secret(_ variable: String) throws(SecretError) -> Secret? {
        try text(variable).map(Secret.init)
    }

    /// Every secret the value holds, one a line.
    package func secrets(_ variable: String) throws(SecretError) -> [Secret] {
        guard let text = try text(variable) else { return [] }
        return text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            .map(Secret.init)
    }

    /// Like `secrets`, failing with a message naming what needs it when the variable is unset.
    package func required(_ variable: String, for what: String) throws(SecretError) -> [Secret] {
        let values = try secrets(variable)
        guard !values.isEmpty else {
            throw SecretError(variable: variable, problem: "\(what): the environment variable \(variable) is not set")
        }
        return values
    }
}

/// A secret the catalog names cannot be read; the message names the variable, never a value.
package struct SecretError: Error, Sendable, Hashable, CustomStringConvertible {
    package let variable: String
    package let problem: String
    package var description: String { problem }
}
