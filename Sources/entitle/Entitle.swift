import ArgumentParser

/// `entitle`: the one command of the project.
@main
struct Entitle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entitle",
        abstract: "Entitle: self-hosted App Store purchase processing on a Redis job queue.",
        subcommands: [
            RunCommand.self, WorkerCommand.self, EnqueueCommand.self, QueuesCommand.self, JobsCommand.self,
            DeadCommand.self,
        ]
    )
}
