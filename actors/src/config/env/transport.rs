//! The fleet's variables: `LEASEHOLD_TRANSPORT_BIND` turns the transport on (the replica joins
//! its fleet, docs/operations.md, "Forwarding between replicas"), with the fleet key from a
//! private file (`LEASEHOLD_FLEET_KEY_FILE`, read when the stores are opened) or from a variable
//! (`LEASEHOLD_FLEET_KEY`). The key is never logged, never quoted in a refusal, and its `Debug`
//! shows only its length.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::Error;
use leasehold::route::{Placement, Rendezvous, Stay};

use super::{EnvVar, Vars, bad, lookup, parse_period};
use crate::transport::{FleetKey, TransportConfig};

/// Where the fleet key comes from.
enum KeySource {
    /// `LEASEHOLD_FLEET_KEY`, decoded already.
    Given(FleetKey),
    /// `LEASEHOLD_FLEET_KEY_FILE`, read at open.
    File(PathBuf),
}

/// The transport the variables ask for, its key file not read yet.
pub(super) struct TransportVars {
    /// `LEASEHOLD_TRANSPORT_BIND`.
    bind: SocketAddr,
    /// `LEASEHOLD_TRANSPORT_ADVERTISE`.
    advertise: Option<String>,
    /// The fleet key's source.
    key: KeySource,
    /// `LEASEHOLD_TRANSPORT_MAX_HOPS`.
    max_hops: Option<u8>,
    /// `LEASEHOLD_TRANSPORT_HOLDER_CACHE` (`Some(None)`: off).
    holder_cache: Option<Option<Duration>>,
    /// `LEASEHOLD_PLACEMENT`.
    placement: Option<Arc<dyn Placement>>,
    /// The variables that were set, to name one in a range error.
    set: Vec<&'static EnvVar>,
}

impl std::fmt::Debug for TransportVars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match &self.key {
            KeySource::Given(key) => format!("{key:?}"),
            KeySource::File(path) => format!("file {}", path.display()),
        };
        f.debug_struct("TransportVars")
            .field("bind", &self.bind)
            .field("advertise", &self.advertise)
            .field("key", &key)
            .field("max_hops", &self.max_hops)
            .field("holder_cache", &self.holder_cache)
            .field("placement", &self.placement)
            .finish()
    }
}

/// The transport's variables, checked for their form; `None` when `LEASEHOLD_TRANSPORT_BIND`
/// is unset (then none of the others may be set: a key or an endpoint without a transport is a
/// mistake, not a default).
pub(super) fn read(vars: &Vars) -> Result<Option<TransportVars>, Error> {
    let var = lookup;
    let (bind_v, advertise_v) = (
        var("LEASEHOLD_TRANSPORT_BIND"),
        var("LEASEHOLD_TRANSPORT_ADVERTISE"),
    );
    let (file_v, key_v) = (var("LEASEHOLD_FLEET_KEY_FILE"), var("LEASEHOLD_FLEET_KEY"));
    let (hops_v, placement_v) = (
        var("LEASEHOLD_TRANSPORT_MAX_HOPS"),
        var("LEASEHOLD_PLACEMENT"),
    );
    let cache_v = var("LEASEHOLD_TRANSPORT_HOLDER_CACHE");
    let Some(bind) = vars.get(bind_v)? else {
        for v in [advertise_v, file_v, key_v, hops_v, placement_v, cache_v] {
            if vars.get(v)?.is_some() {
                return Err(bad(
                    v,
                    "is set but LEASEHOLD_TRANSPORT_BIND is not: without a transport it does nothing",
                ));
            }
        }
        return Ok(None);
    };
    let mut set = vec![bind_v];
    let bind: SocketAddr = bind.parse().map_err(|_| {
        bad(
            bind_v,
            format!("{bind:?} is not IP:PORT (0.0.0.0:7070, [::]:7070, 127.0.0.1:0)"),
        )
    })?;
    let key = match (vars.get(file_v)?, vars.get(key_v)?) {
        (Some(_), Some(_)) => {
            return Err(bad(
                key_v,
                "and LEASEHOLD_FLEET_KEY_FILE are both set: give one",
            ));
        }
        (Some(path), None) => {
            set.push(file_v);
            KeySource::File(PathBuf::from(path))
        }
        (None, Some(hex)) => {
            set.push(key_v);
            KeySource::Given(FleetKey::from_hex(hex).map_err(|e| renamed_key(e, key_v))?)
        }
        (None, None) => {
            return Err(bad(
                file_v,
                "is not set (nor LEASEHOLD_FLEET_KEY): a replica with a transport needs the \
                 fleet key every replica of the fleet shares (openssl rand -hex 32)",
            ));
        }
    };
    let advertise = vars.get(advertise_v)?.map(str::to_owned);
    if advertise.is_some() {
        set.push(advertise_v);
    }
    let max_hops = match vars.get(hops_v)? {
        Some(text) => {
            set.push(hops_v);
            let n = text
                .parse::<u8>()
                .map_err(|_| bad(hops_v, format!("{text:?} is not a whole number up to 255")))?;
            Some(n)
        }
        None => None,
    };
    let holder_cache = match vars.get(cache_v)? {
        Some(text) => {
            set.push(cache_v);
            Some(parse_period(text).map_err(|e| bad(cache_v, e))?)
        }
        None => None,
    };
    let placement: Option<Arc<dyn Placement>> = match vars.get(placement_v)? {
        Some(text) => {
            set.push(placement_v);
            Some(match text.to_ascii_lowercase().as_str() {
                "stay" => Arc::new(Stay),
                "rendezvous" => Arc::new(Rendezvous),
                _ => {
                    return Err(bad(
                        placement_v,
                        format!("{text:?} is not stay or rendezvous"),
                    ));
                }
            })
        }
        None => None,
    };
    Ok(Some(TransportVars {
        bind,
        advertise,
        key,
        max_hops,
        holder_cache,
        placement,
        set,
    }))
}

/// A refusal of the key as the refusal of variable `v` (it never quotes the key).
fn renamed_key(e: Error, v: &'static EnvVar) -> Error {
    match e {
        Error::InvalidOption { reason, .. } => bad(v, reason),
        other => other,
    }
}

impl TransportVars {
    /// The variables that were set.
    pub(super) fn set(&self) -> Vec<&'static EnvVar> {
        self.set.clone()
    }

    /// The transport's configuration, the key file read (it must be private: 0600 or
    /// stricter).
    pub(super) fn config(self) -> Result<TransportConfig, Error> {
        let key = match self.key {
            KeySource::Given(key) => key,
            KeySource::File(path) => read_key_file(&path)?,
        };
        let mut config = TransportConfig::new(self.bind, key);
        config.advertise = self.advertise;
        if let Some(max_hops) = self.max_hops {
            config.max_hops = max_hops;
        }
        if let Some(holder_cache) = self.holder_cache {
            config.holder_cache = holder_cache;
        }
        if let Some(placement) = self.placement {
            config.placement = placement;
        }
        Ok(config)
    }
}

/// The fleet key in the file at `path`: hex, surrounding whitespace ignored. A file the group
/// or others may read is refused (the key would not be the fleet's alone).
fn read_key_file(path: &std::path::Path) -> Result<FleetKey, Error> {
    let v = lookup("LEASEHOLD_FLEET_KEY_FILE");
    let shown = path.display();
    match leasehold::private::check_private(path, false) {
        Ok(Ok(())) => {}
        Ok(Err(mode)) => {
            return Err(bad(
                v,
                format!(
                    "{shown} has mode {mode:o}: the group or others may read the fleet key \
                     (chmod 600 it)"
                ),
            ));
        }
        Err(e) => return Err(bad(v, format!("{shown}: {e}"))),
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(v, format!("{shown}: {e}")))?;
    FleetKey::from_hex(&text).map_err(|e| renamed_key(e, v))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;

    use super::super::EnvConfig;
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        let mut all = vec![(OsString::from("LEASEHOLD_REPLICA_ID"), OsString::from("r1"))];
        all.extend(
            pairs
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        all
    }

    fn refused(pairs: &[(&str, &str)]) -> (&'static str, String) {
        match EnvConfig::from_vars(vars(pairs)) {
            Err(Error::InvalidOption { name, reason }) => (name, reason),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn the_transport_takes_its_variables_and_refuses_each_bad_one_by_name() {
        let env = EnvConfig::from_vars(vars(&[
            ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:0"),
            ("LEASEHOLD_FLEET_KEY", KEY),
            ("LEASEHOLD_TRANSPORT_ADVERTISE", "http://10.0.0.5:7070"),
            ("LEASEHOLD_TRANSPORT_MAX_HOPS", "2"),
            ("LEASEHOLD_TRANSPORT_HOLDER_CACHE", "250ms"),
            ("LEASEHOLD_PLACEMENT", "rendezvous"),
        ]))
        .unwrap();
        let shown = format!("{env:?}");
        assert!(!shown.contains("aabbcc"), "the key is never shown: {shown}");
        let t = env.transport.unwrap().config().unwrap();
        assert_eq!(t.bind, "127.0.0.1:0".parse().unwrap());
        assert_eq!(t.advertise.as_deref(), Some("http://10.0.0.5:7070"));
        assert_eq!(t.max_hops, 2);
        assert_eq!(t.holder_cache, Some(Duration::from_millis(250)));
        let off = EnvConfig::from_vars(vars(&[
            ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:0"),
            ("LEASEHOLD_FLEET_KEY", KEY),
            ("LEASEHOLD_TRANSPORT_HOLDER_CACHE", "off"),
        ]))
        .unwrap();
        assert_eq!(off.transport.unwrap().config().unwrap().holder_cache, None);
        assert!(format!("{:?}", t.placement).contains("Rendezvous"));
        let bad_key = KEY.replace('a', "g");
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![("LEASEHOLD_FLEET_KEY", KEY)], "LEASEHOLD_FLEET_KEY"),
            (
                vec![("LEASEHOLD_TRANSPORT_ADVERTISE", "http://x:1")],
                "LEASEHOLD_TRANSPORT_ADVERTISE",
            ),
            (
                vec![("LEASEHOLD_TRANSPORT_BIND", "localhost:7070")],
                "LEASEHOLD_TRANSPORT_BIND",
            ),
            (
                vec![("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070")],
                "LEASEHOLD_FLEET_KEY_FILE",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", &bad_key),
                ],
                "LEASEHOLD_FLEET_KEY",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", "abcd"),
                ],
                "LEASEHOLD_FLEET_KEY",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", KEY),
                    ("LEASEHOLD_FLEET_KEY_FILE", "/k"),
                ],
                "LEASEHOLD_FLEET_KEY",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", KEY),
                    ("LEASEHOLD_PLACEMENT", "random"),
                ],
                "LEASEHOLD_PLACEMENT",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", KEY),
                    ("LEASEHOLD_TRANSPORT_MAX_HOPS", "300"),
                ],
                "LEASEHOLD_TRANSPORT_MAX_HOPS",
            ),
            (
                vec![
                    ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:7070"),
                    ("LEASEHOLD_FLEET_KEY", KEY),
                    ("LEASEHOLD_TRANSPORT_HOLDER_CACHE", "soon"),
                ],
                "LEASEHOLD_TRANSPORT_HOLDER_CACHE",
            ),
        ];
        for (given, variable) in cases {
            let (name, reason) = refused(&given);
            assert_eq!(name, variable, "{given:?}: {reason}");
            assert!(
                !reason.contains("0011223344") && !reason.contains("g1122"),
                "a refusal never quotes the key: {reason}"
            );
        }
    }

    #[test]
    fn a_key_file_is_read_when_private_and_refused_when_others_may_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.key");
        std::fs::write(&path, format!("{KEY}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let given = [
            ("LEASEHOLD_TRANSPORT_BIND", "127.0.0.1:0"),
            ("LEASEHOLD_FLEET_KEY_FILE", path.to_str().unwrap()),
        ];
        let env = EnvConfig::from_vars(vars(&given)).unwrap();
        match env.transport.unwrap().config() {
            Err(Error::InvalidOption { name, reason }) => {
                assert_eq!(name, "LEASEHOLD_FLEET_KEY_FILE", "{reason}");
                assert!(reason.contains("644"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let env = EnvConfig::from_vars(vars(&given)).unwrap();
        let config = env.transport.unwrap().config().unwrap();
        assert_eq!(
            format!("{:?}", config.fleet_key),
            "FleetKey(<32 bytes, redacted>)"
        );
    }
}
