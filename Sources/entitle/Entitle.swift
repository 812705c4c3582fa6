import ArgumentParser
import Foundation

/// `entitle`: the one command of the project.
@main
struct Entitle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitle",
        abstract: "Entitle: self-hosted App Store purchase processing on a Redis job queue.",
        subcommands: [
            RunCommand.self, APICommand.self, WorkerCommand.self, EnqueueCommand.self, QueuesCommand.self, JobsCommand.self,
            DeadCommand.self, VerifyCommand.self, SimulatorCommand.self, CustomersCommand.self, ReportCommand.self, MigrateCommand.self,
            ReconcileCommand.self, ImportCommand.self, PushCommand.self,
        ]
    )

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // `entitle verify` exits 1 for "not valid", so its usage errors take 2 (as grep and diff do).
            if CommandLine.arguments.dropFirst().first == "verify", exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((VerifyCommand.fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}
