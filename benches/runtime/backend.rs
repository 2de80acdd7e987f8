//! The stores a measurement runs on: the embedded defaults (a SQLite lease file and a durable
//! directory in a temp dir) or, with `LEASEHOLD_BENCH_BACKEND=postgres-s3` and the `postgres`
//! and `s3` features, PostgreSQL and S3 from `scripts/with-servers.sh` (the variables
//! `LEASEHOLD_TEST_PG_URL`, `LEASEHOLD_TEST_S3_ENDPOINT`, `LEASEHOLD_TEST_S3_BUCKET`).
//! `LEASEHOLD_BENCH_SEGMENTS_IN_FLIGHT=N` sets `segments_in_flight` of every replica,
//! `LEASEHOLD_BENCH_SHIP_LINGER_US=N` its `ship_linger` (0: off).
//! Every measurement gets stores of its own (a lease file and directory, or a table and a
//! bucket prefix), so no figure pays for another's leftovers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use leasehold::ReplicaId;
use leasehold::durable::SharedDurableStore;
use leasehold::durable::dir::DirStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold_actors::{Durability, RuntimeConfig, Supervisor};

/// Which stores the benchmark runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite lease file + durable directory.
    Embedded,
    /// PostgreSQL lease table + S3 (moto).
    PostgresS3,
}

impl Backend {
    /// From `LEASEHOLD_BENCH_BACKEND` (`sqlite-dir`, the default, or `postgres-s3`).
    pub fn from_env() -> Self {
        match std::env::var("LEASEHOLD_BENCH_BACKEND").as_deref() {
            Ok("postgres-s3") => Backend::PostgresS3,
            Ok("sqlite-dir") | Err(_) => Backend::Embedded,
            Ok(other) => panic!("LEASEHOLD_BENCH_BACKEND={other:?}: sqlite-dir or postgres-s3"),
        }
    }

    /// Its name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "SqliteLeaseStore + DirStore (embedded defaults)",
            Backend::PostgresS3 => "PostgresLeaseStore + S3Store (moto)",
        }
    }
}

/// One measurement's stores and the directory its replicas keep their ledgers in.
#[derive(Clone)]
pub struct Stores {
    /// The lease store.
    pub leases: SharedLeaseStore,
    /// The durable store.
    pub durable: SharedDurableStore,
    /// Where the replicas' state roots go.
    pub root: PathBuf,
}

/// Fresh stores named `name` under `dir`.
pub async fn stores(backend: Backend, dir: &Path, name: &str) -> Stores {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).expect("bench dir");
    let (leases, durable): (SharedLeaseStore, SharedDurableStore) = match backend {
        Backend::Embedded => (
            Arc::new(SqliteLeaseStore::open(&root.join("leases.db")).expect("lease file")),
            Arc::new(DirStore::open(&root.join("durable")).expect("durable dir")),
        ),
        Backend::PostgresS3 => servers(name).await,
    };
    Stores {
        leases,
        durable,
        root,
    }
}

#[cfg(all(feature = "postgres", feature = "s3"))]
async fn servers(name: &str) -> (SharedLeaseStore, SharedDurableStore) {
    use leasehold::durable::s3::{S3Config, S3Store};
    use leasehold::lease::postgres::PostgresLeaseStore;
    let var = |v: &str| {
        std::env::var(v).unwrap_or_else(|_| panic!("{v} is not set: run scripts/with-servers.sh"))
    };
    let unique = format!(
        "bench_{}_{}",
        std::process::id(),
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let leases = PostgresLeaseStore::connect(&var("LEASEHOLD_TEST_PG_URL"), &unique)
        .await
        .expect("PostgreSQL lease store");
    let durable = S3Store::new(S3Config {
        endpoint: Some(var("LEASEHOLD_TEST_S3_ENDPOINT")),
        region: "us-east-1".into(),
        bucket: var("LEASEHOLD_TEST_S3_BUCKET"),
        prefix: format!("{unique}/"),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        allow_http: true,
    })
    .expect("S3 store");
    (Arc::new(leases), Arc::new(durable))
}

#[cfg(not(all(feature = "postgres", feature = "s3")))]
async fn servers(_name: &str) -> (SharedLeaseStore, SharedDurableStore) {
    panic!("LEASEHOLD_BENCH_BACKEND=postgres-s3 needs --features \"postgres s3\"")
}

/// A replica named `name` on `stores` with `durability`, periodic images off unless `tweak`
/// turns them on, every other option at its default.
pub fn replica(
    stores: &Stores,
    name: &str,
    durability: Durability,
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> Supervisor {
    let mut config = RuntimeConfig::new(
        ReplicaId::new(name).expect("replica id"),
        stores.root.join("nodes").join(name),
        stores.leases.clone(),
        stores.durable.clone(),
    );
    config.durability = durability;
    config.snapshot_every = None;
    // `LEASEHOLD_BENCH_SEGMENTS_IN_FLIGHT=N`: the same run with another pipeline depth.
    if let Some(n) = std::env::var("LEASEHOLD_BENCH_SEGMENTS_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.segments_in_flight = n;
    }
    // `LEASEHOLD_BENCH_SHIP_LINGER_US=N` (0: off): the same run with another `ship_linger`.
    if let Some(us) = std::env::var("LEASEHOLD_BENCH_SHIP_LINGER_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.ship_linger = (us > 0).then(|| std::time::Duration::from_micros(us));
    }
    // `LEASEHOLD_BENCH_SEGMENT_COMPRESSION=zstd`: the same run with segments compressed.
    if std::env::var("LEASEHOLD_BENCH_SEGMENT_COMPRESSION").as_deref() == Ok("zstd") {
        config.segment_compression = leasehold::log::segment::SegmentCompression::Zstd;
    }
    tweak(&mut config);
    Supervisor::start(config).expect("supervisor")
}

/// The three modes, with their names in the output.
pub const MODES: [(&str, Durability); 3] = [
    ("Shipped", Durability::Shipped),
    ("Async 1 s", Durability::ASYNC),
    ("Images", Durability::Images),
];
