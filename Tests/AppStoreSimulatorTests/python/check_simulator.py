"""An independent check of the simulator with Apple's own Python library.

Apple's app-store-server-library verifies the simulator's signed transactions, renewal
infos and notifications given the simulator's root, and its AppStoreServerAPIClient,
pointed at the simulator, reads transaction info, history and statuses.

Usage: python check_simulator.py SIMULATOR_URL
Prints one JSON object with what it read; exits non-zero (with a traceback) on any failure.
"""

import json
import sys
import uuid

import requests
from appstoreserverlibrary.api_client import AppStoreServerAPIClient, GetTransactionHistoryVersion
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.TransactionHistoryRequest import TransactionHistoryRequest
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

BUNDLE_ID = "com.entitle.demo"


def post(base, path, body):
    response = requests.post(base + path, json=body, timeout=30)
    response.raise_for_status()
    return response.json() if response.content else None


def main(base):
    root = requests.get(base + "/simulator/root.cer", timeout=30).content
    verifier = SignedDataVerifier([root], False, Environment.SANDBOX, BUNDLE_ID)

    account = "python-" + uuid.uuid4().hex
    subscription = post(base, "/simulator/purchases", {
        "bundleId": BUNDLE_ID, "productId": "com.entitle.demo.basic.monthly",
        "useIntroductoryOffer": False, "appleAccount": account})
    credits = post(base, "/simulator/purchases", {
        "bundleId": BUNDLE_ID, "productId": "com.entitle.demo.credits.100", "quantity": 3, "appleAccount": account})
    post(base, "/simulator/subscriptions/%s/auto-renew-off" % subscription["originalTransactionId"], {})
    post(base, "/simulator/transactions/%s/refund" % credits["transactionId"], {})

    transaction = verifier.verify_and_decode_signed_transaction(subscription["signedTransaction"])
    renewal = verifier.verify_and_decode_renewal_info(subscription["signedRenewalInfo"])
    consumable = verifier.verify_and_decode_signed_transaction(credits["signedTransaction"])

    notifications = requests.get(base + "/simulator/notifications", timeout=30).json()
    decoded = [verifier.verify_and_decode_notification(item["signedPayload"]) for item in notifications]

    # A key registered with the simulator, and Apple's client pointed at its sandbox.
    key = ec.generate_private_key(ec.SECP256R1())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    post(base, "/simulator/keys", {"keyId": "PYKEY", "issuerId": "py-issuer", "bundleId": BUNDLE_ID, "publicKey": public_pem})
    client = AppStoreServerAPIClient(private_pem, "PYKEY", "py-issuer", BUNDLE_ID, Environment.SANDBOX)
    client._base_url = base + "/sandbox"

    info = client.get_transaction_info(credits["transactionId"])
    info_transaction = verifier.verify_and_decode_signed_transaction(info.signedTransactionInfo)
    history = client.get_transaction_history(
        subscription["transactionId"], None, TransactionHistoryRequest(), GetTransactionHistoryVersion.V2)
    history_ids = [verifier.verify_and_decode_signed_transaction(jws).transactionId for jws in history.signedTransactions]
    statuses = client.get_all_subscription_statuses(subscription["transactionId"])
    last = statuses.data[0].lastTransactions[0]
    status_renewal = verifier.verify_and_decode_renewal_info(last.signedRenewalInfo)

    print(json.dumps({
        "transactionId": transaction.transactionId,
        "productId": transaction.productId,
        "type": transaction.rawType,
        "price": transaction.price,
        "renewalAutoRenewProductId": renewal.autoRenewProductId,
        "consumableQuantity": consumable.quantity,
        "notifications": [[n.rawNotificationType, n.rawSubtype] for n in decoded],
        "infoRevocationDate": info_transaction.revocationDate,
        "historyIds": history_ids,
        "status": last.rawStatus,
        "statusAutoRenewStatus": status_renewal.rawAutoRenewStatus,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
