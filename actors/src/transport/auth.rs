//! The fleet key's MAC: `x-leasehold-mac` = hex HMAC-SHA256(fleet key, body) on a request; on
//! a reply, HMAC-SHA256(fleet key, "leasehold-reply" ‖ the length and bytes of the request's
//! `x-leasehold-mac` ‖ body), so a reply answers the one request it was made for: a reply
//! captured for one request verifies for no other, and a reply's MAC is never a request's.
//! Verified in constant time (the `hmac` crate's `verify_slice`) before the body is decoded: a
//! sender without the key gets nothing decoded, nothing run.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::FleetKey;

/// The MAC of `body` under `key`, as the header carries it.
pub(crate) fn sign(key: &FleetKey, body: &[u8]) -> String {
    hex::encode(mac(key, body).finalize().into_bytes())
}

/// Checks the header's MAC of `body`; `Err` says why not (for the 401's message).
pub(crate) fn verify(key: &FleetKey, body: &[u8], header: Option<&[u8]>) -> Result<(), String> {
    let Some(header) = header else {
        return Err(format!("no {} header", super::MAC_HEADER));
    };
    let claimed = hex::decode(header).map_err(|_| format!("{} is not hex", super::MAC_HEADER))?;
    mac(key, body)
        .verify_slice(&claimed)
        .map_err(|_| "the MAC does not match the fleet key".to_owned())
}

/// What a reply's MAC begins with: a reply's MAC is never a request's.
const REPLY_DOMAIN: &[u8] = b"leasehold-reply";

/// The MAC of the reply `body` to the request whose `x-leasehold-mac` header held
/// `request_mac` (empty when it had none), as the header carries it.
pub(crate) fn sign_reply(key: &FleetKey, request_mac: &[u8], body: &[u8]) -> String {
    hex::encode(reply_mac(key, request_mac, body).finalize().into_bytes())
}

/// Checks the header's MAC of the reply `body` to the request whose MAC header held
/// `request_mac`; `Err` says why not.
pub(crate) fn verify_reply(
    key: &FleetKey,
    request_mac: &[u8],
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), String> {
    let Some(header) = header else {
        return Err(format!("no {} header", super::MAC_HEADER));
    };
    let claimed = hex::decode(header).map_err(|_| format!("{} is not hex", super::MAC_HEADER))?;
    reply_mac(key, request_mac, body)
        .verify_slice(&claimed)
        .map_err(|_| "the MAC is not the fleet's for this request".to_owned())
}

fn reply_mac(key: &FleetKey, request_mac: &[u8], body: &[u8]) -> Hmac<Sha256> {
    let mut mac = mac(key, REPLY_DOMAIN);
    mac.update(&(request_mac.len() as u64).to_le_bytes());
    mac.update(request_mac);
    mac.update(body);
    mac
}

fn mac(key: &FleetKey, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(key.bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> FleetKey {
        FleetKey::new(vec![byte; 32]).unwrap()
    }

    #[test]
    fn a_mac_verifies_under_its_key_only_and_for_its_body_only() {
        let mac = sign(&key(1), b"body");
        assert_eq!(mac.len(), 64);
        assert_eq!(verify(&key(1), b"body", Some(mac.as_bytes())), Ok(()));
        assert!(verify(&key(2), b"body", Some(mac.as_bytes())).is_err());
        assert!(verify(&key(1), b"bodY", Some(mac.as_bytes())).is_err());
        assert!(verify(&key(1), b"body", Some(&mac.as_bytes()[..62])).is_err());
        assert!(verify(&key(1), b"body", Some(b"zz")).is_err());
        assert!(verify(&key(1), b"body", None).is_err());
    }

    #[test]
    fn a_reply_mac_verifies_for_its_request_only_and_is_never_a_request_mac() {
        let mac = sign_reply(&key(1), b"req-a", b"reply");
        let ok = verify_reply(&key(1), b"req-a", b"reply", Some(mac.as_bytes()));
        assert_eq!(ok, Ok(()));
        assert!(verify_reply(&key(1), b"req-b", b"reply", Some(mac.as_bytes())).is_err());
        assert!(verify_reply(&key(1), b"", b"reply", Some(mac.as_bytes())).is_err());
        assert!(verify_reply(&key(2), b"req-a", b"reply", Some(mac.as_bytes())).is_err());
        assert!(verify_reply(&key(1), b"req-a", b"replY", Some(mac.as_bytes())).is_err());
        assert!(verify(&key(1), b"reply", Some(mac.as_bytes())).is_err());
        let request = sign(&key(1), b"reply");
        assert!(verify_reply(&key(1), b"", b"reply", Some(request.as_bytes())).is_err());
    }

    #[test]
    fn a_short_key_is_refused_and_never_shown() {
        assert!(FleetKey::new(vec![1; 31]).is_err());
        assert!(FleetKey::from_hex("abcd").is_err());
        let k = FleetKey::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(format!("{k:?}"), "FleetKey(<32 bytes, redacted>)");
    }
}
