// swift-tools-version:6.2
// Entitle runs on Linux (Debian and Ubuntu, with libhiredis-dev): it uses Glibc, epoll-era
// socket calls and /proc. Swift 6.2 or newer (`isolated deinit`). No Apple platform is
// declared because none is supported.
import PackageDescription

let package = Package(
    name: "entitle",
    products: [
        .executable(name: "entitle", targets: ["entitle"]),
        .library(name: "RedisClient", targets: ["RedisClient"]),
        .library(name: "JobQueue", targets: ["JobQueue"]),
        .library(name: "AppStore", targets: ["AppStore"]),
        .library(name: "AppStoreSimulator", targets: ["AppStoreSimulator"]),
        .library(name: "Entitlements", targets: ["Entitlements"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // Tracing: the libraries make spans through swift-distributed-tracing's API only; the
        // `entitle` executable bootstraps swift-otel's exporter, built with OTLP/HTTP alone (its
        // default traits also build gRPC, which would add minutes to every clean build).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        /// The C library hiredis (Debian's libhiredis-dev), through a module map.
        .systemLibrary(
            name: "CHiredis",
            pkgConfig: "hiredis",
            providers: [.apt(["libhiredis-dev"])]
        ),
        /// zlib (Debian's zlib1g-dev), through a module map.
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        /// Deflate with a preset dictionary, one call each way: customers' documents and
        /// finished jobs' results are kept deflated.
        .target(name: "Deflate", dependencies: ["CZlib"]),
        /// `Duration` as seconds, milliseconds and nanoseconds, saturating: the one conversion.
        .target(name: "DurationUnits"),
        /// A Redis client over hiredis: connection actors on their own threads, a pool, scripts.
        .target(
            name: "RedisClient",
            dependencies: [
                "DurationUnits",
                "CHiredis",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        /// Child processes and a private redis-server on a free loopback port: for `entitle run`
        /// and the tests, not part of any library's surface.
        .target(
            name: "LocalProcesses",
            dependencies: ["DurationUnits", "RedisClient", .product(name: "Logging", package: "swift-log")]
        ),
        /// The reliable job queue on Redis lists and the actor-based worker runtime.
        .target(
            name: "JobQueue",
            dependencies: [
                "Deflate",
                "DurationUnits",
                "RedisClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        /// Everything Apple: signed-data (JWS) and receipt (PKCS#7) verification, models,
        /// and the verifyReceipt and App Store Server API clients.
        .target(
            name: "AppStore",
            dependencies: [
                "DurationUnits",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        /// Apple Push Notification service's provider API: device tokens, the ES256 provider
        /// token, requests and Apple's reasons, and a client over HTTP/2.
        .target(
            name: "APNs",
            dependencies: [
                "DurationUnits",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        /// The local APNs: Apple's provider API over HTTP/2 and TLS with a certificate made at
        /// start, checking provider tokens and topics as Apple does, recording what it accepts.
        .target(
            name: "LocalAPNs",
            dependencies: [
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        /// The domain: publishers' catalogs, access periods, subscriptions, credits; pure, no I/O.
        .target(name: "Entitlements"),
        /// Reports from the event log: the pieces a customer counts in, the fold of events into
        /// daily figures, the queries over them; pure, no I/O.
        .target(name: "Reporting", dependencies: ["Entitlements"]),
        /// What the API and the jobs share: the deployment configuration, Apple's gateway and
        /// evidence, the Redis-backed entitlement store and its keys, locks, change events, job
        /// payloads and documents, secrets.
        .target(
            name: "EntitleCore",
            dependencies: [
                "DurationUnits",
                "AppStore", "APNs", "Deflate", "Entitlements", "JobQueue", "RedisClient", "Reporting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        /// The entitlement jobs (receipt, transfer, refund, renewal-check, notification,
        /// webhook) and the renewal sweep: handlers only, on the core's store and gateway.
        .target(
            name: "EntitlementJobs",
            dependencies: [
                "DurationUnits",
                "AppStore", "APNs", "Entitlements", "EntitleCore", "JobQueue", "Reporting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        /// The HTTP API: purchases, notifications, jobs, entitlements, operations, the dashboard.
        .target(
            name: "HTTPAPI",
            dependencies: [
                "DurationUnits",
                "AppStore", "APNs", "Entitlements", "JobQueue", "EntitleCore", "Reporting",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            // The dashboard's HTML, CSS and JavaScript, served as they are.
            resources: [.copy("Resources/Dashboard")]
        ),
        /// The local App Store: Apple-shaped signing, products, subscriptions over simulated time,
        /// notifications, and Apple's endpoints plus a control API over HTTP.
        .target(
            name: "AppStoreSimulator",
            dependencies: [
                "DurationUnits",
                "AppStore",
                "LocalAPNs",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        /// The `entitle` command: worker, enqueue, queues, jobs, dead.
        .executableTarget(
            name: "entitle",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "RedisClient",
                "JobQueue",
                "AppStore",
                "AppStoreSimulator",
                "Entitlements",
                "EntitleCore",
                "EntitlementJobs",
                "HTTPAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                // The exporter: only the bootstrap knows swift-otel.
                .product(name: "OTel", package: "swift-otel"),
            ]
        ),
        /// `bench/verify.sh`'s Swift side: signed-transaction verifications per CPU second.
        .executableTarget(
            name: "verify-bench",
            dependencies: ["AppStore"],
            path: "bench/VerifyBenchmark"
        ),
        /// `bench/cluster.sh`'s routing part: client cost per command, standalone vs cluster mode.
        .executableTarget(
            name: "cluster-bench",
            dependencies: ["RedisClient", .product(name: "Logging", package: "swift-log")],
            path: "bench/ClusterBenchmark"
        ),
        /// `bench/reports.sh`: a year's report for 100,000 subscribers, and the bytes of the log and figures.
        .executableTarget(
            name: "report-bench",
            dependencies: ["EntitleCore", "Entitlements", "Reporting", "RedisClient", .product(name: "Logging", package: "swift-log")],
            path: "bench/ReportBenchmark"
        ),
        /// `bench/push.sh`'s seeding and measuring: customers, devices, the audience lookup.
        .executableTarget(
            name: "push-bench",
            dependencies: [
                "APNs", "EntitleCore", "Entitlements", "RedisClient", "DurationUnits", .product(name: "Logging", package: "swift-log"),
            ],
            path: "bench/PushBenchmark"
        ),
        /// Starts a private redis-server for tests when the test command did not give one.
        .target(
            name: "RedisTestSupport",
            dependencies: [
                "LocalProcesses",
                "DurationUnits", "RedisClient",
            ],
            path: "Tests/RedisTestSupport"
        ),
        .testTarget(
            name: "RedisClientTests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits", "RedisClient", "RedisTestSupport",
            ]
        ),
        .testTarget(
            name: "JobQueueTests",
            dependencies: ["DurationUnits", "JobQueue", "LocalProcesses", "RedisClient", "RedisTestSupport"],
            // The enqueue script of the hash's first format, run by a test as an older producer would.
            exclude: ["Fixtures"]
        ),
        /// Seeded mutations of real inputs, for the fuzz tests.
        .target(name: "FuzzSupport", path: "Tests/FuzzSupport"),
        /// Real HTTP servers on loopback for tests of HTTP clients.
        .target(
            name: "HTTPTestSupport",
            dependencies: [.product(name: "Hummingbird", package: "hummingbird"), .product(name: "Logging", package: "swift-log")],
            path: "Tests/HTTPTestSupport"
        ),
        .testTarget(
            name: "AppStoreTests",
            dependencies: [
                "DurationUnits",
                "AppStore",
                "AppStoreSimulator",
                "HTTPTestSupport",
                "FuzzSupport",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "AppStoreSimulatorTests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "AppStore",
                "AppStoreSimulator",
                "HTTPTestSupport",
                "RedisClient",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["python"]
        ),
        .testTarget(name: "EntitlementsTests", dependencies: ["Entitlements"]),
        /// The APNs client against the local APNs on loopback.
        .testTarget(
            name: "APNsTests",
            dependencies: [
                "APNs", "LocalAPNs",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "ReportingTests", dependencies: ["Entitlements", "Reporting"]),
        .testTarget(
            name: "EntitlementWorkerTests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "EntitleCore", "EntitlementJobs", "Entitlements", "AppStore", "AppStoreSimulator", "RedisClient", "RedisTestSupport",
                "JobQueue", "HTTPTestSupport", "FuzzSupport", "Reporting",
                .product(name: "Hummingbird", package: "hummingbird"),
            ]
        ),
        /// Real processes end to end: redis-server, `entitle simulator`, `entitle worker`.
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "JobQueue", "RedisClient", "RedisTestSupport", "HTTPTestSupport", "Entitlements", "EntitleCore", "EntitlementJobs",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        /// The HTTP API on loopback: a real Redis, the simulator, a worker; the OpenAPI
        /// document; the dashboard in headless Chromium.
        .testTarget(
            name: "APITests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "HTTPAPI", "EntitleCore", "EntitlementJobs", "JobQueue", "Entitlements", "AppStore", "AppStoreSimulator", "RedisClient",
                "RedisTestSupport",
                "HTTPTestSupport", "FuzzSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["python", "hostile-client.tsv"]
        ),
        .testTarget(
            name: "EntitleCLITests",
            dependencies: [
                "LocalProcesses",
                "DurationUnits",
                "JobQueue", "RedisClient", "RedisTestSupport", "Entitlements", "EntitleCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
