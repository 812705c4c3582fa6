import ArgumentParser

/// The catalog a command checks its input against, and the queue it queues its job on.
struct CatalogOptions: ParsableArguments {
    @Option(
        help: """
            The publishers' catalog (default: $ENTITLE_CATALOG; with ENTITLE_ENV=development, \
            Config/catalog.development.json).
            """)
    var catalog: String?

    @Option(help: "The queue the workers read.")
    var queue: String = "default"
}
