import Deflate
import Foundation

/// The event log's deflated entries (fields `Z`, a compact event, and `D`, a change of report
/// pieces): the entry's JSON deflated (zlib's format, with its checksum) with a dictionary of
/// what entries say, in base64. An entry is a few hundred bytes that share little with
/// themselves but much with every other entry (the names, the event types, the currencies,
/// the shape of a report piece); primed with them, deflate keeps what is the entry's own
/// (its customer, dates, transaction and product ids): about half the bytes. The log keeps
/// each entry for the publisher's retention (400 days unless set), so this is most of what a
/// subscriber costs at rest.
///
/// The dictionary is part of the format (a test pins it): changing it means new field names,
/// and reading both.
enum DeflatedEntry {
    /// zlib's default: these entries are too short for a higher level to find more.
    static let level: Int32 = 6

    /// `json` deflated, in base64.
    static func encode(_ json: String) throws -> String {
        Data(try Deflate.compress(Array(json.utf8), dictionary: dictionary, level: level)).base64EncodedString()
    }

    /// The JSON a deflated entry holds, or `nil` when it is not one (not base64, damaged, or
    /// deflated with another dictionary).
    static func decode(_ value: String) -> String? {
        guard let deflated = Data(base64Encoded: value),
            let json = try? Deflate.decompress(Array(deflated), dictionary: dictionary, limit: 1 << 20)
        else { return nil }
        return String(decoding: json, as: UTF8.self)
    }

    /// What entries say most, the likeliest last (deflate reaches the end of its window with
    /// the shortest distances): the rarer short names and event types, common currencies,
    /// storefronts, product-id words and mail domains, then report pieces and the events a
    /// purchase and a renewal make, in the order `CompactEvent` writes their fields. Nothing
    /// of one publisher's (its product ids, its customers).
    static let dictionary: [UInt8] = Array(dictionaryText.utf8)
    static let dictionaryText = """
        "aa":true,"ch":,"cf":true,"co":true,"ef":,"fs":true,"fr":"","fp":"","g":,"oi":"","ok":"promotional",\
        "ok":"offerCode","ok":"winBack","pb":,"px":,"pr":,"re":"","rf":"","rm":,"ro":true,"rs":true,"rp":,"rt":"",\
        "rd":"","sh":true,"sf":,"to":"","tp":"","tr":true,"vb":"","pv":true,"pu":,"im":true,"I":"","R":,"k":"",\
        "y":"initial_purchase","y":"trial_converted","y":"product_change","y":"cancellation","y":"uncancellation",\
        "y":"billing_issue","y":"grace_period_started","y":"grace_period_expired","y":"billing_recovered",\
        "y":"expiration","y":"refund","y":"refund_reversed","y":"refund_adjusted","y":"revoked","y":"transfer",\
        "y":"non_renewing_purchase","y":"extension","y":"price_increase","y":"credits_spent",\
        "y":"credits_clawed_back","y":"temporary_access_granted","y":"temporary_access_resolved",\
        .premium.monthly.yearly.annual.weekly.pro.plus.subscription.credits.coins.gems.lifetime,\
        "@hotmail.com","@outlook.com","EUR","GBP","JPY","CAD","AUD","DEU","GBR","FRA","JPN","CAN","AUS",\
        {"am":100,"ba":100,"cu":"USD","c":"@gmail.com","v":1,"en":"Production","o":17,"pm":990,"ps":"apple",\
        "p":"com.","s":"USA","t":"2000000","y":"credits_granted","r":\
        "r":[{"c":"USD","f":17,"m":9990,"o":"","p":"paying","pr":"com.","s":"USA","t":17}]}\
        {"a":[{"c":"USD","e":"sandbox","f":17,"o":"","p":"trial","pr":"com.","s":"USA","t":17}],"c":"@gmail.com"}\
        {"cu":"USD","c":"@icloud.com","v":2,"en":"Sandbox","x":17,"o":17,"of":"","ok":"introductory","pm":0,\
        "ps":"apple","p":"com.","s":"USA","t":"2000000","y":"offer_redeemed","r":\
        {"cu":"USD","c":"@gmail.com","v":1,"en":"Production","x":17,"o":17,"of":"premium","pm":9990,"ps":"apple",\
        "p":"com.","s":"USA","t":"2000000","y":"renewal","r":,"ot":"2000000\
        {"cu":"USD","c":"@yahoo.com","v":1,"en":"Production","x":17,"o":17,"of":"premium","pm":0,"ps":"apple",\
        "p":"com..monthly","s":"USA","t":"2000000","y":"trial_started","r":
        """
}
