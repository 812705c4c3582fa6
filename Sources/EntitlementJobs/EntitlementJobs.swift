import EntitleCore
import JobQueue

/// The entitlement job types and how the worker runs them.
package enum EntitlementJobs {
    /// `registry` with every entitlement job type added.
    package static func register(in registry: inout JobHandlerRegistry, service: EntitlementService) {
        let apple = RetryPolicy(base: .seconds(2), cap: .seconds(600), maxAttempts: 12)
        // Every type has its registration: the switch fails to compile when a type is added without one.
        for type in EntitlementJobType.allCases {
            let registration =
                switch type {
                case .receipt: JobRegistration(handler: ReceiptJobHandler(service: service), retryPolicy: apple)
                case .transfer: JobRegistration(handler: TransferJobHandler(service: service), retryPolicy: apple)
                case .refund: JobRegistration(handler: RefundJobHandler(service: service), retryPolicy: apple)
                case .renewalCheck:
                    JobRegistration(
                        handler: RenewalCheckJobHandler(service: service),
                        retryPolicy: RetryPolicy(base: .seconds(5), cap: .seconds(3600), maxAttempts: 20))
                case .notification: JobRegistration(handler: NotificationJobHandler(service: service), retryPolicy: apple)
                case .spend: JobRegistration(handler: SpendJobHandler(service: service), retryPolicy: apple)
                case .appAccountToken: JobRegistration(handler: AppAccountTokenJobHandler(service: service), retryPolicy: apple)
                case .consumption: JobRegistration(handler: ConsumptionJobHandler(service: service), retryPolicy: apple)
                case .reconcile: JobRegistration(handler: ReconcileJobHandler(service: service), retryPolicy: apple, timeout: .seconds(600))
                case .resync: JobRegistration(handler: ResyncJobHandler(service: service), retryPolicy: apple, timeout: .seconds(120))
                case .push: JobRegistration(handler: PushJobHandler(service: service), retryPolicy: apple, timeout: .seconds(120))
                case .pushBatch:
                    // APNs' throttling and outages: back off to ten minutes, for about two hours.
                    JobRegistration(
                        handler: PushBatchJobHandler(service: service),
                        retryPolicy: RetryPolicy(base: .seconds(1), cap: .seconds(600), maxAttempts: 15), timeout: .seconds(120))
                case .webhook:
                    // Publishers' endpoints go down for hours: back off to an hour, for about a day.
                    JobRegistration(
                        handler: WebhookJobHandler(service: service),
                        retryPolicy: RetryPolicy(base: .seconds(5), cap: .seconds(3600), maxAttempts: 30),
                        timeout: .seconds(20))
                }
            registry.register(type.rawValue, registration)
        }
    }
}
