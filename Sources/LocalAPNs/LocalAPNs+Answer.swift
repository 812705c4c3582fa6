import Foundation

/// What the server writes back for one request.
struct PushAnswer: Sendable, Equatable {
    var status: Int
    /// Apple's `reason`; `nil` for 200.
    var reason: String?
    /// For 410: milliseconds since 1970.
    var timestamp: Int64?
    /// `apns-id`: the request's, uppercase, or a new one.
    var apnsId: String
    /// `apns-unique-id`, as the sandbox sends it with each accepted push.
    var uniqueId: String?
}

extension LocalAPNs {
    /// A token's `iat` may be at most this old (Apple: one hour).
    static let tokenLifetime: TimeInterval = 3600
    /// …and at most this far ahead, for clocks slightly out of step.
    static let allowedClockSkew: TimeInterval = 300
    /// A connection may change its token at most once in this long (Apple: 20 minutes).
    static let tokenUpdateInterval: TimeInterval = 20 * 60

    /// Answers `request`: Apple's checks in Apple's order, then the injected faults, then accepts
    /// and records the push.
    func answer(_ request: PushRequest, now: Date = Date()) -> PushAnswer {
        let apnsId = request.apnsId.flatMap { UUID(uuidString: $0)?.uuidString } ?? UUID().uuidString
        let answer: PushAnswer
        do {
            let push = try check(request, apnsId: apnsId, now: now)
            if let fault = takeFault(for: push.token) {
                answer = PushAnswer(
                    status: fault.status, reason: fault.reason,
                    timestamp: fault.status == 410 ? fault.timestamp ?? Self.milliseconds(now) : nil, apnsId: apnsId)
            } else {
                accepted.append(push)
                answer = PushAnswer(status: 200, apnsId: apnsId, uniqueId: UUID().uuidString.lowercased())
            }
        } catch {
            answer = PushAnswer(status: error.status, reason: error.reason, apnsId: apnsId)
        }
        counts[answer.status, default: 0] += 1
        return answer
    }

    private func check(_ request: PushRequest, apnsId: String, now: Date) throws(APNsRefusal) -> Push {
        guard request.method == "POST" else { throw .methodNotAllowed }
        let prefix = "/3/device/"
        guard request.path.hasPrefix(prefix) else { throw .badPath }
        let deviceToken = String(request.path.dropFirst(prefix.count))
        guard !deviceToken.contains("/") else { throw .badPath }
        guard !deviceToken.isEmpty else { throw .missingDeviceToken }
        guard !request.hasDuplicateHeaders else { throw .duplicateHeaders }

        let (jwt, token) = try providerToken(request.authorization)
        let seconds = now.timeIntervalSince1970
        guard seconds - Double(token.issuedAt) <= Self.tokenLifetime else { throw .expiredProviderToken }
        guard Double(token.issuedAt) - seconds <= Self.allowedClockSkew else { throw .invalidProviderToken }
        try noteToken(jwt, on: request.connection, now: now)

        guard let topic = request.topic, !topic.isEmpty else { throw .missingTopic }
        guard let key = keys[token.keyId], let topicSuffix = PushTypeTopics.suffix(of: topic, on: key.topics) else {
            throw .topicDisallowed
        }
        guard let pushType = request.pushType, let pushTypeSuffix = PushTypeTopics.suffixByPushType[pushType] else {
            throw .invalidPushType
        }
        // Apple: a VoIP push goes to `<bundle id>.voip`, and so on for each suffixed type.
        guard topicSuffix == pushTypeSuffix else { throw .badTopic }

        var priority: Int?
        if let text = request.priority {
            guard ["1", "5", "10"].contains(text), let value = Int(text) else { throw .badPriority }
            // Apple: background pushes are always priority 5; 10 is an error.
            guard !(pushType == "background" && value == 10) else { throw .badPriority }
            priority = value
        }
        var expiration: Int64?
        if let text = request.expiration {
            guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                let value = Int64(text)
            else { throw .badExpirationDate }
            expiration = value
        }
        if let collapseId = request.collapseId, collapseId.utf8.count > 64 { throw .badCollapseId }
        if request.apnsId != nil, request.apnsId.flatMap(UUID.init(uuidString:)) == nil { throw .badMessageId }
        guard Self.isDeviceToken(deviceToken) else { throw .badDeviceToken }

        guard request.bodySize > 0 else { throw .payloadEmpty }
        let limit = pushType == "voip" ? 5120 : 4096
        guard request.bodySize <= limit, let body = request.body else { throw .payloadTooLarge }
        // Apple names no reason for a body that is no JSON object; PayloadEmpty is the nearest: it
        // carries no payload APNs can deliver.
        guard request.bodyIsJSONObject else { throw .payloadEmpty }

        return Push(
            token: deviceToken, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
            collapseId: request.collapseId, apnsId: apnsId, payload: String(decoding: body, as: UTF8.self),
            keyId: token.keyId, teamId: token.teamId, receivedAt: Self.milliseconds(now))
    }

    /// The verified token of an `authorization: bearer <jwt>` field, from the cache when seen before.
    private func providerToken(_ authorization: String?) throws(APNsRefusal) -> (jwt: String, token: ProviderToken) {
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            throw .missingProviderToken
        }
        let jwt = String(authorization.dropFirst(7))
        if let verdict = verifiedTokens[jwt] { return (jwt, try verdict.get()) }
        let verdict: Result<ProviderToken, APNsRefusal>
        do { verdict = .success(try ProviderToken.verify(jwt[...], keys: keys)) } catch { verdict = .failure(error) }
        if verifiedTokens.count >= Self.tokenCacheLimit { verifiedTokens.removeAll() }
        verifiedTokens[jwt] = verdict
        return (jwt, try verdict.get())
    }

    /// Apple: a connection that changes its provider token more than once in 20 minutes gets
    /// TooManyProviderTokenUpdates. A refused change leaves the connection on its token.
    private func noteToken(_ jwt: String, on connection: ObjectIdentifier?, now: Date) throws(APNsRefusal) {
        guard let connection else { return }
        guard let current = connections[connection] else {
            connections[connection] = ConnectionTokens(token: jwt)
            return
        }
        guard current.token != jwt else { return }
        if let last = current.lastUpdate, now.timeIntervalSince(last) < Self.tokenUpdateInterval {
            throw .tooManyProviderTokenUpdates
        }
        connections[connection] = ConnectionTokens(token: jwt, lastUpdate: now)
    }

    /// The first fault for `token`, counted down.
    private func takeFault(for token: String) -> Fault? {
        guard !faults.isEmpty else { return nil }
        let lowercased = token.lowercased()
        guard let index = faults.firstIndex(where: { $0.token == nil || $0.token?.lowercased() == lowercased }) else {
            return nil
        }
        let fault = faults[index]
        if let count = fault.count {
            if count <= 1 { faults.remove(at: index) } else { faults[index].count = count - 1 }
        }
        return fault
    }

    /// Hex of 32 to 100 bytes: Apple's tokens were 32 bytes and may grow ("don't make assumptions").
    static func isDeviceToken(_ text: String) -> Bool {
        let count = text.utf8.count
        return count % 2 == 0 && (64...200).contains(count)
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
                    || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
            }
    }

    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }
}
