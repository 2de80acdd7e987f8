//! Reading `LEASEHOLD_*`: the defaults, every variable, and each bad value refused by the name
//! of its variable with nothing opened.

use std::ffi::OsString;
use std::path::Path;

use super::*;

fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

fn refused_as(outcome: Result<impl std::fmt::Debug, Error>) -> (&'static str, String) {
    match outcome {
        Err(Error::InvalidOption { name, reason }) => (name, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn only_the_replica_id_is_required_and_the_embedded_defaults_fill_the_rest() {
    let env =
        EnvConfig::from_vars(vars(&[("LEASEHOLD_REPLICA_ID", "r1"), ("PATH", "/bin")])).unwrap();
    assert_eq!(env.replica_id.as_str(), "r1");
    assert_eq!(env.state_root, Path::new("state"));
    assert_eq!(env.leases, LeaseStoreUrl::Sqlite("leases.db".into()));
    assert_eq!(env.durable, DurableStoreUrl::Dir("durable".into()));
    assert!(env.options.is_empty());
    let (name, reason) = refused_as(EnvConfig::from_vars(vars(&[("LEASEHOLD_TTL", "30s")])));
    assert_eq!(name, "LEASEHOLD_REPLICA_ID", "{reason}");
    let (name, _) = refused_as(EnvConfig::from_vars(vars(&[("LEASEHOLD_REPLICA_ID", " ")])));
    assert_eq!(name, "LEASEHOLD_REPLICA_ID", "an empty variable is unset");
}

#[tokio::test]
async fn every_variable_sets_its_option() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display();
    let (state, leases, durable) = (
        format!("{root}/state"),
        format!("sqlite://{root}/leases.db"),
        format!("file://{root}/durable"),
    );
    let config = EnvConfig::from_vars(vars(&[
        ("LEASEHOLD_REPLICA_ID", "replica-7"),
        ("LEASEHOLD_STATE_ROOT", &state),
        ("LEASEHOLD_LEASES", &leases),
        ("LEASEHOLD_DURABLE", &durable),
        ("LEASEHOLD_DURABILITY", "async:250ms"),
        ("LEASEHOLD_TTL", "20s"),
        ("LEASEHOLD_MARGIN", "4s"),
        ("LEASEHOLD_RENEW_EVERY", "5s"),
        ("LEASEHOLD_SNAPSHOT_EVERY", "off"),
        ("LEASEHOLD_COMPACTION_SEGMENTS", "50"),
        ("LEASEHOLD_COMPACTION_BYTES", "8 MiB"),
        ("LEASEHOLD_SEGMENT_LIMIT", "128KiB"),
        ("LEASEHOLD_SEGMENTS_IN_FLIGHT", "2"),
        ("LEASEHOLD_SHIP_LINGER", "off"),
        ("LEASEHOLD_ASYNC_PENDING_LIMIT", "1048576"),
        ("LEASEHOLD_RETAIN", "1h 30m"),
        ("LEASEHOLD_LOCAL_SWEEP_EVERY", "2m"),
        ("LEASEHOLD_DRAIN_TIMEOUT", "45s"),
        ("LEASEHOLD_CLOSE_CONCURRENCY", "3"),
        ("LEASEHOLD_MAX_OPEN", "100"),
        ("LEASEHOLD_STORE_DEADLINE", "500ms"),
        ("LEASEHOLD_PUT_LIFETIME", "90s"),
        ("LEASEHOLD_RECONCILE_EVERY", "off"),
        ("LEASEHOLD_ARBITERS", "2"),
        ("LEASEHOLD_PASSIVATE_AFTER", "5m"),
    ]))
    .unwrap()
    .build()
    .await
    .unwrap();
    let s = Duration::from_secs;
    assert_eq!(config.replica_id.as_str(), "replica-7");
    assert_eq!(config.state_root, Path::new(&state));
    assert!(
        dir.path().join("leases.db").is_file(),
        "a replica creates its stores"
    );
    assert!(dir.path().join("durable").is_dir());
    assert_eq!(
        config.durability,
        Durability::Async {
            every: Duration::from_millis(250)
        }
    );
    assert_eq!(
        (config.ttl, config.margin, config.renew_every),
        (s(20), s(4), Some(s(5)))
    );
    assert_eq!(config.snapshot_every, None);
    assert_eq!(
        config.compaction,
        Compaction {
            segments: 50,
            bytes: 8 << 20
        }
    );
    assert_eq!(
        (
            config.segment_limit,
            config.segments_in_flight,
            config.async_pending_limit
        ),
        (128 << 10, 2, 1 << 20)
    );
    assert_eq!(config.ship_linger, None);
    assert_eq!(config.retain, s(90 * 60));
    assert_eq!(config.local_sweep_every, Some(s(120)));
    assert_eq!(config.drain_timeout, s(45));
    assert_eq!(
        (config.close_concurrency, config.max_open, config.arbiters),
        (3, 100, 2)
    );
    assert_eq!(config.store_deadline, Duration::from_millis(500));
    assert_eq!(config.put_lifetime, s(90));
    assert_eq!(config.reconcile_every, None);
    assert_eq!(config.passivate_after, Some(s(300)));
}

#[tokio::test]
async fn passivation_is_on_by_default_and_off_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let mut given = vec![
        ("LEASEHOLD_REPLICA_ID", "r1".to_string()),
        ("LEASEHOLD_STATE_ROOT", format!("{root}/state")),
        ("LEASEHOLD_LEASES", format!("{root}/leases.db")),
        ("LEASEHOLD_DURABLE", format!("{root}/durable")),
    ];
    let read = |given: &[(&str, String)]| {
        let pairs: Vec<(&str, &str)> = given.iter().map(|(k, v)| (*k, v.as_str())).collect();
        EnvConfig::from_vars(vars(&pairs)).unwrap()
    };
    let config = read(&given).build().await.unwrap();
    assert_eq!(config.passivate_after, Some(Duration::from_secs(60)));
    given.push(("LEASEHOLD_PASSIVATE_AFTER", "off".into()));
    let config = read(&given).build().await.unwrap();
    assert_eq!(config.passivate_after, None);
}

#[test]
fn each_bad_value_is_refused_by_the_name_of_its_variable() {
    let cases = [
        ("LEASEHOLD_REPLICA_ID", "no spaces"),
        ("LEASEHOLD_LEASES", "postgress://db/x"),
        ("LEASEHOLD_DURABLE", "gs://bucket"),
        ("LEASEHOLD_DURABILITY", "sometimes"),
        ("LEASEHOLD_DURABILITY", "async:soon"),
        ("LEASEHOLD_TTL", "30"),
        ("LEASEHOLD_TTL", "30x"),
        ("LEASEHOLD_MARGIN", "-1s"),
        ("LEASEHOLD_RENEW_EVERY", "never"),
        ("LEASEHOLD_COMPACTION_SEGMENTS", "1e3"),
        ("LEASEHOLD_COMPACTION_BYTES", "64MB"),
        ("LEASEHOLD_SEGMENT_LIMIT", "99999999999999999999GiB"),
        ("LEASEHOLD_ASYNC_PENDING_LIMIT", "lots"),
        ("LEASEHOLD_CLOSE_CONCURRENCY", "-2"),
        ("LEASEHOLD_MAX_OPEN", "1.5"),
        ("LEASEHOLD_ARBITERS", "two"),
        ("LEASEHOLD_PUT_LIFETIME", "2 fortnights"),
        ("LEASEHOLD_PASSIVATE_AFTER", "60"),
    ];
    for (variable, value) in cases {
        let mut given = vec![("LEASEHOLD_REPLICA_ID", "r1")];
        if variable != "LEASEHOLD_REPLICA_ID" {
            given.push((variable, value));
        } else {
            given[0].1 = value;
        }
        let (name, reason) = refused_as(EnvConfig::from_vars(vars(&given)));
        assert_eq!(name, variable, "{value:?}: {reason}");
    }
}

#[test]
fn a_value_that_is_not_utf8_is_refused_by_name() {
    use std::os::unix::ffi::OsStringExt;
    let given = vec![
        (OsString::from("LEASEHOLD_REPLICA_ID"), OsString::from("r1")),
        (
            OsString::from("LEASEHOLD_STATE_ROOT"),
            OsString::from_vec(vec![0xff, b'/']),
        ),
    ];
    let (name, _) = refused_as(EnvConfig::from_vars(given));
    assert_eq!(name, "LEASEHOLD_STATE_ROOT");
}

#[tokio::test]
async fn a_value_out_of_range_is_refused_by_its_variable_once_validated() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let base = [
        ("LEASEHOLD_REPLICA_ID", "r1".to_string()),
        ("LEASEHOLD_STATE_ROOT", format!("{root}/state")),
        ("LEASEHOLD_LEASES", format!("{root}/leases.db")),
        ("LEASEHOLD_DURABLE", format!("{root}/durable")),
    ];
    for (variable, value) in [
        ("LEASEHOLD_TTL", "0s"),
        ("LEASEHOLD_DRAIN_TIMEOUT", "2days"),
        ("LEASEHOLD_ARBITERS", "0"),
        ("LEASEHOLD_COMPACTION_BYTES", "0"),
        ("LEASEHOLD_PASSIVATE_AFTER", "0s"),
    ] {
        let mut given: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, v.as_str())).collect();
        given.push((variable, value));
        let env = EnvConfig::from_vars(vars(&given)).unwrap();
        let (name, reason) = refused_as(env.build().await);
        assert_eq!(name, variable, "{value:?}: {reason}");
    }
}

#[test]
fn sizes_and_durations_take_their_documented_forms() {
    assert_eq!(parse_bytes("4096"), Ok(4096));
    assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
    assert_eq!(parse_bytes("64 mib"), Ok(64 << 20));
    assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
    assert!(parse_bytes("1.5GiB").is_err());
    assert!(parse_bytes("GiB").is_err());
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("2").is_err());
}

/// docs/operations.md's table names every variable with its default: the docs cannot forget one.
#[test]
fn the_operations_guide_lists_every_variable_and_its_default() {
    let guide = include_str!("../../../../docs/operations.md");
    for v in ENV_VARS {
        let row = guide
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", v.name)))
            .unwrap_or_else(|| panic!("docs/operations.md has no row for {}", v.name));
        assert!(
            row.contains(v.default),
            "{}: default {:?} not in {row}",
            v.name,
            v.default
        );
    }
}
