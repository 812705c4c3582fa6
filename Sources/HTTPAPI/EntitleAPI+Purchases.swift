import AppStore
import EntitleCore
import Entitlements
import Foundation
import HTTPTypes
import Hummingbird
import JobQueue

extension EntitleAPI {
    /// A purchase as the app handed it over, checked, ready to become a `receipt` job.
    struct Purchase {
        var payload: JobPayloads.Receipt
        /// The transaction it is about: one job at a time per transaction (409 otherwise).
        var transactionKey: String
        /// The app a verified signed transaction or app receipt is for.
        var bundleId: String?
    }

    func registerPurchases(on routes: RouteTable) {
        routes.add(.post, "/v1/purchases") { request, context in
            let caller = try caller(request, context)
            let input = try await RequestInput.json(request, limit: configuration.maxBodyBytes)
            try input.allow(["customer", "signedTransaction", "transactionId", "appReceipt", "bundleId", "offerId", "couponCode"])
            let signedTransaction = try input.string("signedTransaction", maxLength: 64 << 10)
            let transactionId = try input.string("transactionId", maxLength: 64)
            let appReceipt = try input.string("appReceipt", maxLength: configuration.maxBodyBytes)
            var bundleId = try input.string("bundleId")
            let publisher: Publisher
            let customer: String
            var appKey: String?
            switch caller {
            case .secretKey(let owner):
                publisher = owner
                customer = try input.required("customer")
            case .app(let owner, let key, let tokenCustomer):
                // An app cannot keep a secret: its key proves nothing about the customer (the
                // customer token does) and a bare transaction id proves no purchase.
                guard let tokenCustomer else {
                    throw APIError(
                        .unauthorized, "customerTokenRequired", "an app key posts purchases with its customer's X-Customer-Token")
                }
                guard signedTransaction != nil || appReceipt != nil else {
                    throw APIError(
                        .forbidden, "proofRequired", "an app key posts Apple's proof of purchase: signedTransaction or appReceipt")
                }
                if let named = try input.string("customer"), owner.canonicalCustomerId(named) != tokenCustomer {
                    throw APIError(.forbidden, "forbidden", "the customer token is for another customer")
                }
                if !key.bundleIds.isEmpty {
                    if let bundleId, !key.bundleIds.contains(bundleId) {
                        throw APIError(
                            .forbidden, "forbidden", "app key \(key.id) posts purchases of \(key.bundleIds.joined(separator: ", ")) only")
                    }
                    if bundleId == nil, key.bundleIds.count == 1 { bundleId = key.bundleIds[0] }
                }
                (publisher, customer, appKey) = (owner, tokenCustomer, key.id)
            case .admin:
                throw APIError(.forbidden, "forbidden", "purchases take a publisher's secret key or an app key, not the admin token")
            }
            var purchase = try await check(
                publisher: publisher, customer: customer, signedTransaction: signedTransaction, transactionId: transactionId,
                appReceipt: appReceipt, bundleId: bundleId, offerId: try input.string("offerId"),
                couponCode: try input.string("couponCode", maxLength: 64))
            if case .app(_, let key, _) = caller, !key.bundleIds.isEmpty, let verified = purchase.bundleId,
                !key.bundleIds.contains(verified)
            {
                throw APIError(
                    .forbidden, "forbidden", "app key \(key.id) posts purchases of \(key.bundleIds.joined(separator: ", ")) only")
            }
            purchase.payload.appKey = appKey
            if try dryRunParameter(request) {
                return try await preview(purchase, wait: try waitParameter(request, default: configuration.maxWait / 3))
            }
            let id = try await submit(purchase)
            return JSONBody.jobId(id, status: .accepted)
        }

        // Cleeng's `POST /apple/payment`, for the publisher's middleware built against it.
        routes.add(.post, "/apple/payment") { request, context in
            let publisher = try cleengPublisher(request, context)
            let input = try await RequestInput.json(request, limit: configuration.maxBodyBytes)
            try input.allow(["customerEmail", "offerId", "receipt", "appType", "ipAddress", "couponCode"])
            let customer = try input.required("customerEmail")
            let offerId = try input.required("offerId")
            guard let receipt = try input.object("receipt") else { throw APIError.badRequest("receipt is required") }
            try receipt.allow(["transactionId", "receiptData"])
            let appType = try input.required("appType")
            guard appType == "ios" || appType == "tvos" else { throw APIError.badRequest("appType must be ios or tvos") }
            _ = try input.string("ipAddress", maxLength: 64)
            let purchase = try await check(
                publisher: publisher, customer: customer, customerField: "customerEmail", signedTransaction: nil,
                transactionId: try receipt.required("transactionId", maxLength: 64),
                appReceipt: try receipt.required("receiptData", maxLength: configuration.maxBodyBytes), bundleId: nil,
                offerId: offerId, couponCode: try input.string("couponCode", maxLength: 64))
            let id = try await submit(purchase, conflictIsError: false)
            return try JSONBody.response(encoding: ["message": "OK", "jobId": id])
        }

        // Cloud Softphone's in-app purchase web service: GET, form or JSON in; waits for the verdict.
        routes.add(.get, "/v1/validate") { request, context in
            let values = RequestInput.form(Substring(request.uri.query ?? ""))
            return try await validate(request, context, RequestInput(values))
        }
        routes.add(.post, "/v1/validate") { request, context in
            let format = validationFormat(request, publisher: nil)
            do {
                let body = try await RequestInput.body(request, limit: configuration.maxBodyBytes)
                let type = request.headers[.contentType]?.lowercased() ?? ""
                var values: [String: JSONValue]
                if type.contains("json") {
                    guard !body.isEmpty else { throw APIError.badRequest("the body is not a JSON object") }
                    values = try RequestInput.jsonObject(body)
                } else {
                    values = RequestInput.form(Substring(decoding: body, as: UTF8.self))
                }
                // The query may carry what the body does not (Cloud Softphone puts the token in the URL).
                for (name, value) in RequestInput.form(Substring(request.uri.query ?? "")) where values[name] == nil {
                    values[name] = value
                }
                return try await validate(request, context, RequestInput(values))
            } catch let error as APIError {
                return try ValidationReply(error).response(format)
            } catch {
                return try ValidationReply(APIError(.internalServerError, "internal", "the request could not be read")).response(format)
            }
        }
    }

    /// The checks every purchase route makes; a signed transaction is verified here, so a
    /// forged one is refused before anything is queued.
    func check(
        publisher: Publisher, customer: String, customerField: String = "customer", signedTransaction: String?,
        transactionId: String?, appReceipt rawReceipt: String?, bundleId: String?, offerId: String?, couponCode: String?,
        price: String? = nil, currency: String? = nil
    ) async throws -> Purchase {
        let customer = try RequestInput.checkCustomer(customer, for: publisher, field: customerField)
        // Base64 never holds a space: one in a receipt is a `+` that a query string turned
        // into a space (Cloud Softphone sends receipts unencoded in GET queries).
        let appReceipt = rawReceipt.map { $0.replacingOccurrences(of: " ", with: "+") }
        let given = [signedTransaction, transactionId, appReceipt].compactMap { $0 }.filter { !$0.isEmpty }
        guard !given.isEmpty else { throw APIError.badRequest("give one of signedTransaction, transactionId and appReceipt") }
        if signedTransaction != nil && given.count > 1 {
            throw APIError.badRequest("a signedTransaction comes alone, without transactionId or appReceipt")
        }
        if let transactionId, !(1...32).contains(transactionId.count) || !transactionId.allSatisfy(\.isASCIIDigit) {
            throw APIError.badRequest("transactionId must be the App Store's digits")
        }
        if let bundleId, publisher.app(bundleId: bundleId) == nil {
            throw APIError.unprocessable("unknownApp", "publisher \(publisher.id) has no app \(bundleId)")
        }
        let offer = try offerId.map { id in
            guard let offer = publisher.offer(id) else {
                throw APIError.unprocessable("unknownOffer", "publisher \(publisher.id) has no offer \(id)")
            }
            guard !offer.productIds.isEmpty else {
                throw APIError.unprocessable("offerMismatch", "offer \(id) is not mapped to any App Store product")
            }
            return offer
        }
        let transactionKey: String
        var verifiedBundle: String?
        if let jws = signedTransaction {
            let transaction: JWSTransaction
            do {
                transaction = try await settings.verifyTransaction(jws, publisher: publisher)
            } catch {
                switch error.code {
                case .invalidAppIdentifier: throw APIError.unprocessable("wrongBundle", error.message)
                case .invalidEnvironment: throw APIError.unprocessable("wrongEnvironment", error.message)
                default: throw APIError.badRequest("signedTransaction is not a valid App Store transaction: \(error.message)")
                }
            }
            // An app transaction (or Apple's mock) verifies as a transaction with no id: nothing to claim.
            guard transaction.transactionId != nil else {
                throw APIError.badRequest(
                    "signedTransaction is not a valid App Store transaction: it names no transaction (an app transaction?)")
            }
            if let offer, let product = transaction.productId, !offer.productIds.contains(product) {
                throw APIError.unprocessable("offerMismatch", "offer \(offer.offerId) is not sold by product \(product)")
            }
            transactionKey = transaction.transactionId ?? Self.digest(jws)
            verifiedBundle = transaction.bundleId
        } else if let receipt = appReceipt {
            guard let bytes = AppleBase64.decode(receipt), bytes.count >= 16 else {
                throw APIError.badRequest("the app receipt is not base64 of a receipt")
            }
            // A receipt that verifies here names its app, as a signed transaction does: one of an
            // app the publisher does not have (or not the app named) is refused now, not queued
            // for verifyReceipt to refuse. One that does not verify here (an iOS 6 transaction
            // receipt, a chain this server does not know) is left for Apple to judge.
            if let app = try? await settings.appReceipts.verify(der: bytes).bundleId {
                guard publisher.app(bundleId: app) != nil else {
                    throw APIError.unprocessable("wrongBundle", "the app receipt is for an app \(publisher.id) does not have")
                }
                if let bundleId, bundleId != app {
                    throw APIError.unprocessable("wrongBundle", "the app receipt is for \(app), not \(bundleId)")
                }
                verifiedBundle = app
            }
            transactionKey = transactionId ?? "receipt-" + Self.digest(receipt)
        } else {
            transactionKey = transactionId ?? ""
        }
        // The app a receipt verified here names is the one its job asks Apple with (its shared
        // secret, its bundle): a publisher's second app need not say which it is.
        let payload = JobPayloads.Receipt(
            publisher: publisher.id, customer: customer, signedTransaction: signedTransaction, transactionId: transactionId,
            appReceipt: appReceipt, bundleId: bundleId ?? (appReceipt != nil ? verifiedBundle : nil), offerId: offerId,
            couponCode: couponCode,
            price: price.flatMap(PurchaseFact.price(reported:)), currency: currency.flatMap(PurchaseFact.currency(reported:)))
        return Purchase(payload: payload, transactionKey: transactionKey, bundleId: verifiedBundle)
    }

    /// `?dryRun=true|false` (absent: false).
    func dryRunParameter(_ request: Request) throws -> Bool {
        let given = request.uri.queryParameters.getAll("dryRun")
        guard given.count <= 1 else { throw APIError.badRequest("dryRun is given more than once") }
        switch given.first {
        case nil, "false": return false
        case "true": return true
        default: throw APIError.badRequest("dryRun must be true or false")
        }
    }

    /// A dry run of a claim (`POST /v1/purchases?dryRun=true`): a `receipt` job that proves the
    /// purchase and says what the claim would do (its `claim`, the access it would give),
    /// writing nothing to the customer, the owners or the transaction's unique key. Answers
    /// the job as `GET /v1/jobs/{id}` does: 200 once it has finished, within `wait`, else 202.
    func preview(_ purchase: Purchase, wait: Duration) async throws -> Response {
        var payload = purchase.payload
        payload.dryRun = true
        // One dry run at a time per customer and transaction (a client asking again while one
        // runs gets that one), tried once: a preflight must not multiply Apple calls and jobs.
        var request = try EnqueueRequest(
            payload, queue: configuration.queue,
            uniqueKey: "dry-run:\(payload.publisher):\(Self.digest(payload.customer + "\n" + purchase.transactionKey))")
        request.maxAttempts = 1
        let id = try await enqueue(request).id
        guard let record = try await waitForJob(id, timeout: wait), record.status.isFinished else {
            return JSONBody.jobId(id, status: .accepted)
        }
        var document = record.document()
        document.idempotencyKey = nil
        return try JSONBody.response(encoding: document)
    }

    /// Enqueues the `receipt` job; one job at a time per transaction. An exact repeat of a
    /// request whose job is unfinished (an app retrying) gets that job: duplicates in flight
    /// are one job and one effect. Once it has finished, a repeat is a new job, answered
    /// from the customer's state then (the claim is idempotent per Apple transaction).
    ///
    /// A different request about a transaction whose job is unfinished is refused (409);
    /// when `conflictIsError` is false (clients that expect an answer, not a 409), it waits
    /// for that job, then queues its own; if the transaction is still busy after the wait it
    /// is refused with 409 and `Retry-After`, never answered with the other request's job.
    func submit(_ purchase: Purchase, conflictIsError: Bool = true) async throws -> String {
        try await enqueueOnce(
            try EnqueueRequest(
                purchase.payload, queue: configuration.queue,
                uniqueKey: "purchase:\(purchase.payload.publisher):\(purchase.transactionKey)"),
            conflictIsError: conflictIsError)
    }

    /// Enqueues a job about one transaction (its `uniqueKey`), as `submit` describes: an
    /// exact repeat in flight is the running job, a repeat after it finished is a new job.
    func enqueueOnce(_ request: EnqueueRequest, conflictIsError: Bool = true) async throws -> String {
        var waited = false
        for _ in 0..<3 {
            let result = try await enqueue(request)
            guard result.outcome == .conflict else { return result.id }
            let holder = try await jobQueue.job(id: result.id, queue: configuration.queue)
            if holder?.payload == request.payload { return result.id }
            // It finished (and dropped its payload) since it was found holding the key: go again.
            if holder?.status.isFinished == true { continue }
            if conflictIsError {
                var error = APIError(
                    .conflict, "inFlight", "job \(result.id) for this transaction has not finished; poll it, or retry once it has")
                error.headers[.location] = "/v1/jobs/\(result.id)"
                throw error
            }
            // Still another request's after the wait: its job (another customer's, perhaps) is
            // not this request's answer, so none is given yet.
            guard !waited else { break }
            _ = try await waitForJob(result.id, timeout: configuration.maxWait / 3)
            waited = true
        }
        var error = APIError(
            .conflict, "inFlight", "another request about this transaction is still being processed; retry in a moment")
        error.headers[.retryAfter] = "2"
        throw error
    }

    /// A hex SHA-256, shortened: keys, not secrets.
    static func digest(_ text: String) -> String { SHA256Hex.of(text, bytes: 16) }

    /// Cleeng's credentials: `X-Publisher-Token` (a secret key) and `Authorization: Basic`.
    func cleengPublisher(_ request: Request, _ context: APIRequestContext) throws -> Publisher {
        guard let name = HTTPField.Name("X-Publisher-Token"), let token = request.headers[name], !token.isEmpty else {
            throw failedAuthentication(context, APIError.unauthorized("send X-Publisher-Token and Authorization: Basic", scheme: "Basic"))
        }
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("basic "),
            let decoded = AppleBase64.decode(header.dropFirst(6).trimmingCharacters(in: .whitespaces))
        else {
            throw failedAuthentication(
                context, APIError.unauthorized("send Authorization: Basic <base64 of user:password>", scheme: "Basic"))
        }
        guard let id = credentials.current.publisher(cleengToken: token, basicCredentials: String(decoding: decoded, as: UTF8.self)),
            let publisher = settings.catalog.publisher(id)
        else {
            throw failedAuthentication(
                context, APIError.unauthorized("the publisher token or the Basic credentials are not valid", scheme: "Basic"))
        }
        try limit("publisher:" + publisher.id, publisher)
        return publisher
    }

    // MARK: Cloud Softphone

    func validate(_ request: Request, _ context: APIRequestContext, _ input: RequestInput) async throws -> Response {
        var format = validationFormat(request, publisher: nil)
        do {
            let publisher: Publisher
            var appKey: String?
            let caller = try caller(request, context, token: try input.string("token"))
            var username = try input.string("username")
            switch caller {
            case .secretKey(let owner): publisher = owner
            case .app(let owner, let key, let tokenCustomer):
                // The seed's apps call this route themselves with a username and a receipt (Apple's
                // proof). Once the publisher mints customer tokens, its apps must send one.
                if owner.api?.customerTokens != nil {
                    guard let tokenCustomer else {
                        throw APIError(.unauthorized, "customerTokenRequired", "send the customer's X-Customer-Token with the app key")
                    }
                    if let username, owner.canonicalCustomerId(username) != tokenCustomer {
                        throw APIError(.forbidden, "forbidden", "the customer token is for another customer")
                    }
                    username = tokenCustomer
                }
                (publisher, appKey) = (owner, key.id)
            case .admin: throw APIError(.forbidden, "forbidden", "this route takes a publisher's key, not the admin token")
            }
            format = validationFormat(request, publisher: publisher)
            let product = try input.string("productCode") ?? input.required("product")
            guard let offer = publisher.offer(forProduct: product) else {
                throw APIError(.forbidden, "unknownProduct", "This product cannot be bought here.")
            }
            guard let username, !username.isEmpty else { throw APIError.badRequest("username is required") }
            var purchase = try await check(
                publisher: publisher, customer: username, customerField: "username", signedTransaction: nil,
                transactionId: try input.string("transactionId", maxLength: 64),
                appReceipt: try input.required("receipt", maxLength: configuration.maxBodyBytes), bundleId: nil,
                offerId: offer.offerId, couponCode: nil, price: try input.string("price", maxLength: 32),
                currency: try input.string("currency", maxLength: 8))
            purchase.payload.appKey = appKey
            let id = try await submit(purchase, conflictIsError: false)
            let wait = min(configuration.maxWait, .milliseconds(Int64((publisher.api?.validation?.waitSeconds ?? 10) * 1000)))
            guard let record = try await waitForJob(id, timeout: wait), record.status.isFinished else {
                var reply = ValidationReply(
                    status: .serviceUnavailable, ok: false, message: "The purchase is still being verified. Try again in a moment.")
                reply.jobId = id
                reply.retryAfter = 2
                return try reply.response(format)
            }
            return try ValidationReply(record).response(format)
        } catch let error as APIError {
            return try ValidationReply(error).response(format)
        } catch {
            logger.error("validate failed", metadata: ["error": "\(error)"])
            return try ValidationReply(APIError(.internalServerError, "internal", "The purchase could not be verified now.")).response(
                format)
        }
    }

    /// Accept first, then the publisher's configured format, then XML.
    func validationFormat(_ request: Request, publisher: Publisher?) -> Publisher.APIAccess.Validation.Format {
        let accept = request.headers[.accept]?.lowercased() ?? ""
        if accept.contains("application/json") { return .json }
        if accept.contains("application/x-www-form-urlencoded") { return .form }
        if accept.contains("xml") { return .xml }
        return publisher?.api?.validation?.format ?? .xml
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
