import Entitlements
import Foundation
import Testing

@Suite struct EntitlementCatalogTests {
    static var developmentCatalog: Data {
        get throws {
            try Data(
                contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                    .deletingLastPathComponent().appending(path: "Config/catalog.development.json"))
        }
    }

    @Test func theDevelopmentCatalogMatchesTheSimulatorsDemo() throws {
        let catalog = try EntitlementCatalog(json: try Self.developmentCatalog)
        let demo = try #require(catalog.publisher("demo"))
        #expect(demo.transferPolicy == .transfer)
        #expect(demo.offer(forProduct: "com.entitle.demo.premium.annual")?.offerId == "premium")
        #expect(demo.offer(forProduct: "com.entitle.demo.credits.100")?.credits == 100)
        #expect(demo.level(ofProduct: "com.entitle.demo.basic.monthly") == 2)
        #expect(demo.app(bundleId: "com.entitle.demo")?.sharedSecretVariable == "ENTITLE_DEMO_SHARED_SECRET")
    }

    @Test func aWrongCatalogNamesTheBadEntry() throws {
        func publisher(_ offers: String, extra: String = "") -> Data {
            Data(
                #"{"publishers":[{"id":"p1","apps":[{"bundleId":"com.x","environments":["Sandbox"]}],"offers":\#(offers)\#(extra)}]}"#.utf8)
        }
        let cases: [(Data, String)] = [
            (publisher(#"[{"offerId":"a","productIds":[]}]"#), #"publisher "p1" offer "a": maps no App Store product"#),
            (publisher(#"[{"offerId":"a","productIds":["x"]}]"#), #"offer "a": grants neither entitlements nor credits"#),
            (
                publisher(#"[{"offerId":"a","productIds":["x"],"credits":1},{"offerId":"b","productIds":["x"],"credits":1}]"#),
                #"offer "b": product x is already mapped to offer "a""#
            ),
            (publisher(#"[{"offerId":"bad id","productIds":["x"],"credits":1}]"#), #"offer "bad id""#),
            (
                publisher(
                    #"[{"offerId":"a","productIds":["x"],"credits":1}]"#, extra: #","couponCampaigns":[{"code":"C","offerId":"zz"}]"#),
                #"coupon "C": names no offer "zz""#
            ),
            (
                Data(#"{"publishers":[{"id":"p1","apps":[{"bundleId":"com.x","environments":["Production"]}],"offers":[]}]}"#.utf8),
                "appAppleId"
            ),
            (Data(#"{"publishers":[{"id":"p1","apps":[]}]}"#.utf8), "publishers[0]: offers is missing"),
            // An app belongs to one publisher: its notifications and purchases have one home.
            (
                Data(
                    #"{"publishers":[{"id":"p1","apps":[{"bundleId":"com.x","environments":["Sandbox"]}],"offers":[]},{"id":"p2","apps":[{"bundleId":"com.x","environments":["Sandbox"]}],"offers":[]}]}"#
                        .utf8),
                #"publisher "p2" app "com.x": bundle id com.x is also an app of publisher "p1""#
            ),
            (
                publisher(
                    #"[{"offerId":"a","productIds":["x"],"credits":1}]"#,
                    extra: #","api":{"appKeys":[{"id":"ios","variable":"K","bundleIds":["com.y"]}]}"#),
                #"app key "ios": names com.y, which is not an app of the publisher"#
            ),
            (
                publisher(
                    #"[{"offerId":"a","productIds":["x"],"credits":1}]"#,
                    extra: #","api":{"customerTokens":{"keys":[{"kid":"k","algorithm":"HS256"}]}}"#),
                #"customer token key "k": HS256 keys name their secretVariable"#
            ),
            (
                publisher(#"[{"offerId":"a","productIds":["x"],"credits":1}]"#, extra: #","api":{"rateLimit":{"perSecond":0,"burst":1}}"#),
                "perSecond must be above 0"
            ),
            (
                publisher(#"[{"offerId":"a","productIds":["x"],"credits":1}]"#, extra: #","appAccountTokenNamespace":"nope""#),
                "nope is not a UUID"
            ),
        ]
        for (data, message) in cases {
            let error = #expect(throws: CatalogError.self) { try EntitlementCatalog(json: data) }
            #expect(error?.description.contains(message) == true, "\(error?.description ?? "") should say \(message)")
        }
    }
}
