import JobQueue

/// The entitlement job types and how the worker runs them.
public enum EntitlementJobs {
    public static let types = ["receipt", "transfer", "refund", "renewal-check", "notification", "webhook", "spend", "app-account-token"]

    /// `registry` with every entitlement job type added.
    public static func register(in registry: inout JobHandlerRegistry, service: EntitlementService) {
        let apple = RetryPolicy(base: .seconds(2), cap: .seconds(600), maxAttempts: 12)
        registry.register("receipt", JobRegistration(handler: ReceiptJobHandler(service: service), retryPolicy: apple))
        registry.register("transfer", JobRegistration(handler: TransferJobHandler(service: service), retryPolicy: apple))
        registry.register("refund", JobRegistration(handler: RefundJobHandler(service: service), retryPolicy: apple))
        registry.register(
            "renewal-check",
            JobRegistration(
                handler: RenewalCheckJobHandler(service: service),
                retryPolicy: RetryPolicy(base: .seconds(5), cap: .seconds(3600), maxAttempts: 20)))
        registry.register("notification", JobRegistration(handler: NotificationJobHandler(service: service), retryPolicy: apple))
        registry.register("spend", JobRegistration(handler: SpendJobHandler(service: service), retryPolicy: apple))
        registry.register("app-account-token", JobRegistration(handler: AppAccountTokenJobHandler(service: service), retryPolicy: apple))
        // Publishers' endpoints go down for hours: back off to an hour, for about a day.
        registry.register(
            "webhook",
            JobRegistration(
                handler: WebhookJobHandler(service: service),
                retryPolicy: RetryPolicy(base: .seconds(5), cap: .seconds(3600), maxAttempts: 30),
                timeout: .seconds(20)))
    }
}
