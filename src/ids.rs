//! Validated identifiers: organizations, tenants, replicas, and the lease key built from them.
//!
//! An id is 1 to 128 characters from `[A-Za-z0-9_-]`. That rules out `/`, `.` (and so `..`),
//! NUL, white space and the empty string, so an id can stand as one path segment and one
//! object-key segment without escaping anything. A tenant id is derived, never a raw user id:
//! [`derive_tenant_id`] gives 64 lowercase hex characters.

use std::fmt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// The shortest key [`derive_tenant_id`] accepts, in bytes.
pub const MIN_DERIVATION_KEY_LEN: usize = 16;

/// Why an id was refused. Nothing is touched when an id is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is the empty string.
    #[error("{kind} id is empty")]
    Empty {
        /// Which kind of id (`org`, `tenant`, `replica`).
        kind: &'static str,
    },
    /// The id is longer than [`MAX_ID_LEN`].
    #[error("{kind} id is {len} bytes long; at most {MAX_ID_LEN} are allowed")]
    TooLong {
        /// Which kind of id.
        kind: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The id holds a character outside `[A-Za-z0-9_-]`.
    #[error("{kind} id {shown} has {what} at byte {at}; ids use only A-Z, a-z, 0-9, '_' and '-'")]
    BadChar {
        /// Which kind of id.
        kind: &'static str,
        /// The id, escaped for display.
        shown: String,
        /// The offending character, named (`'/'`, `NUL`, `'.'`…).
        what: String,
        /// Its byte offset.
        at: usize,
    },
    /// The key given to [`derive_tenant_id`] is too short to be a secret.
    #[error(
        "the tenant-id derivation key is {len} bytes; at least {MIN_DERIVATION_KEY_LEN} are required"
    )]
    WeakKey {
        /// Its length in bytes.
        len: usize,
    },
}

fn check(kind: &'static str, s: &str) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if s.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { kind, len: s.len() });
    }
    for (at, ch) in s.char_indices() {
        if !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '-') {
            let what = match ch {
                '\0' => "NUL".to_string(),
                '/' => "'/'".to_string(),
                '.' if s[at..].starts_with("..") => "'..'".to_string(),
                c => format!("{c:?}"),
            };
            return Err(IdError::BadChar {
                kind,
                shown: format!("{s:?}"),
                what,
                at,
            });
        }
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `s` and wraps it; a refused id is a typed [`IdError`].
            pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
                let s = s.into();
                check($kind, &s)?;
                Ok(Self(s))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// An organization: the first segment of every key and path of its tenants.
    OrgId,
    "org"
);
id_type!(
    /// A tenant inside an organization. Derive it with [`derive_tenant_id`]; never use a raw user id.
    TenantId,
    "tenant"
);
id_type!(
    /// A replica: the owner name written into the leases it holds.
    ReplicaId,
    "replica"
);

/// Derives a tenant id from an identity: `HMAC-SHA256(key, len(issuer) ‖ issuer ‖ subject)` as
/// 64 lowercase hex characters.
///
/// The issuer is length-prefixed (4 bytes, big-endian) so that no two `(issuer, subject)` pairs
/// share an input. The key must be at least [`MIN_DERIVATION_KEY_LEN`] bytes.
pub fn derive_tenant_id(key: &[u8], issuer: &str, subject: &str) -> Result<TenantId, IdError> {
    if key.len() < MIN_DERIVATION_KEY_LEN {
        return Err(IdError::WeakKey { len: key.len() });
    }
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .map_err(|_| IdError::WeakKey { len: key.len() })?;
    let issuer_len = u32::try_from(issuer.len()).unwrap_or(u32::MAX);
    mac.update(&issuer_len.to_be_bytes());
    mac.update(issuer.as_bytes());
    mac.update(subject.as_bytes());
    TenantId::new(hex::encode(mac.finalize().into_bytes()))
}

/// The key of a tenant's lease and the prefix of its durable objects: `<org>/<tenant>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseKey {
    /// The organization.
    org: OrgId,
    /// The tenant.
    tenant: TenantId,
    /// `<org>/<tenant>`, kept to hand out as `&str`.
    text: String,
}

impl LeaseKey {
    /// The key of `(org, tenant)`.
    pub fn new(org: &OrgId, tenant: &TenantId) -> Self {
        Self {
            org: org.clone(),
            tenant: tenant.clone(),
            text: format!("{org}/{tenant}"),
        }
    }

    /// Parses `<org>/<tenant>`, validating both ids.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let (org, tenant) = s.split_once('/').ok_or_else(|| IdError::BadChar {
            kind: "lease key",
            shown: format!("{s:?}"),
            what: "no '/' between org and tenant".to_string(),
            at: s.len(),
        })?;
        Ok(Self::new(&OrgId::new(org)?, &TenantId::new(tenant)?))
    }

    /// The organization.
    pub fn org(&self) -> &OrgId {
        &self.org
    }

    /// The tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// `<org>/<tenant>`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// `<org>/<tenant>/`: the durable prefix holding every object of this tenant, and nothing else.
    pub fn prefix(&self) -> String {
        format!("{}/", self.text)
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Shorthand for [`LeaseKey::new`].
pub fn lease_key(org: &OrgId, tenant: &TenantId) -> LeaseKey {
    LeaseKey::new(org, tenant)
}

/// `<state_root>/orgs/<org>/tenants/<tenant>`: where a replica keeps a tenant's local files.
/// This only builds the path; [`crate::paths`] checks it before anything is deleted.
pub fn tenant_root(state_root: &Path, org: &OrgId, tenant: &TenantId) -> PathBuf {
    state_root
        .join("orgs")
        .join(org.as_str())
        .join("tenants")
        .join(tenant.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_ids_pass() {
        for s in ["acme", "A-b_9", &"x".repeat(MAX_ID_LEN)] {
            assert!(OrgId::new(s).is_ok(), "{s}");
        }
    }

    #[test]
    fn bad_ids_get_a_typed_error_naming_the_problem() {
        assert_eq!(TenantId::new(""), Err(IdError::Empty { kind: "tenant" }));
        assert!(matches!(
            OrgId::new("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { len: 129, .. })
        ));
        for (s, what) in [
            ("a/b", "'/'"),
            ("..", "'..'"),
            ("a..b", "'..'"),
            ("a\0b", "NUL"),
            ("a b", "' '"),
            ("é", "'é'"),
        ] {
            match OrgId::new(s) {
                Err(IdError::BadChar { what: w, .. }) => assert_eq!(w, what, "{s:?}"),
                other => panic!("{s:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn derived_tenant_ids_are_stable_hex_and_unambiguous() {
        let key = [9u8; 32];
        let a = derive_tenant_id(&key, "https://idp.example/acme", "user").unwrap();
        assert_eq!(a.as_str().len(), 64);
        assert!(
            a.as_str()
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(
            a,
            derive_tenant_id(&key, "https://idp.example/acme", "user").unwrap()
        );
        // The same concatenation split differently is a different identity.
        assert_ne!(
            derive_tenant_id(&key, "ab", "c").unwrap(),
            derive_tenant_id(&key, "a", "bc").unwrap()
        );
        assert_ne!(
            a,
            derive_tenant_id(&[8u8; 32], "https://idp.example/acme", "user").unwrap()
        );
        assert_eq!(
            derive_tenant_id(&[1u8; 4], "i", "s"),
            Err(IdError::WeakKey { len: 4 })
        );
    }

    #[test]
    fn lease_keys_and_tenant_roots() {
        let org = OrgId::new("acme").unwrap();
        let t = TenantId::new("t1").unwrap();
        let k = lease_key(&org, &t);
        assert_eq!(k.as_str(), "acme/t1");
        assert_eq!(k.prefix(), "acme/t1/");
        assert_eq!(LeaseKey::parse("acme/t1").unwrap(), k);
        assert!(LeaseKey::parse("acme").is_err());
        assert!(LeaseKey::parse("acme/../x").is_err());
        assert_eq!(
            tenant_root(Path::new("/s"), &org, &t),
            PathBuf::from("/s/orgs/acme/tenants/t1")
        );
    }
}
