//! The stores a run shares: which backend (`--backend`), how every process of the run opens it,
//! and what its lease records say about time.
//!
//! ```text
//!  sqlite-dir   leases  <run dir>/leases.db                          SqliteLeaseStore
//!               images  <run dir>/durable/                           DirStore
//!               a record's expires_at: the host's CLOCK_MONOTONIC, the drill's own clock
//!  postgres-s3  leases  table <run name> at $LEASEHOLD_TEST_PG_URL    PostgresLeaseStore
//!               images  s3://$LEASEHOLD_TEST_S3_BUCKET/<run name>/    S3Store
//!                       at $LEASEHOLD_TEST_S3_ENDPOINT
//!               a record's expires_at: the database server's wall clock, never compared
//! ```
//!
//! The driver, every replica and the final checker open the same stores from the same run
//! directory and run name. `postgres-s3` needs the `postgres` and `s3` features and the servers
//! that `scripts/with-servers.sh` (or `scripts/test.sh`) starts; its run name is
//! `drill_<seed>_<driver pid>`, so runs sharing one server never see each other.

use std::path::Path;
use std::sync::Arc;

use leasehold::durable::SharedDurableStore;
use leasehold::durable::dir::DirStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::lease::sqlite::SqliteLeaseStore;

use crate::cluster::BoxError;

/// Where a run keeps its leases and images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backend {
    /// A SQLite lease file and a durable directory in the run directory (one host).
    #[default]
    SqliteDir,
    /// A PostgreSQL table and an S3 bucket prefix named after the run (a fleet's backends).
    PostgresS3,
}

impl Backend {
    /// The backend as written on the command line.
    pub fn as_arg(self) -> &'static str {
        match self {
            Backend::SqliteDir => "sqlite-dir",
            Backend::PostgresS3 => "postgres-s3",
        }
    }

    /// Whether a lease record's `expires_at_ms` is the host's `CLOCK_MONOTONIC`, the clock of
    /// every drill timestamp. On PostgreSQL it is the server's wall clock: nothing in the
    /// drill may compare it with a drill time.
    pub fn records_use_host_clock(self) -> bool {
        match self {
            Backend::SqliteDir => true,
            Backend::PostgresS3 => false,
        }
    }
}

/// The name of a run's PostgreSQL table and S3 prefix: `drill_<seed>_<pid>`.
pub fn run_name(seed: u64) -> String {
    format!("drill_{seed}_{}", std::process::id())
}

/// The stores of a run, unwrapped (every process wraps them in its own faults).
#[derive(Debug, Clone)]
pub struct Stores {
    /// The lease store.
    pub leases: SharedLeaseStore,
    /// The durable store.
    pub durable: SharedDurableStore,
    /// The SQLite lease file's handle, to hold its connection idle before a stop (`None` on
    /// PostgreSQL).
    pub lease_file: Option<SqliteLeaseStore>,
    /// Where they are, for the driver's first lines.
    pub location: String,
}

/// Opens the stores of the run in `run_dir` named `run_name`.
pub async fn open(backend: Backend, run_dir: &Path, run_name: &str) -> Result<Stores, BoxError> {
    match backend {
        Backend::SqliteDir => {
            let leases = SqliteLeaseStore::open(&run_dir.join("leases.db"))?;
            let durable = DirStore::open(&run_dir.join("durable"))?;
            Ok(Stores {
                leases: Arc::new(leases.clone()),
                durable: Arc::new(durable),
                lease_file: Some(leases),
                location: format!("{0}/leases.db, {0}/durable/", run_dir.display()),
            })
        }
        Backend::PostgresS3 => servers::open(run_name).await,
    }
}

/// PostgreSQL and S3, from the servers `scripts/with-servers.sh` starts.
#[cfg(all(feature = "postgres", feature = "s3"))]
mod servers {
    use std::sync::Arc;

    use leasehold::durable::s3::{S3Config, S3Store};
    use leasehold::lease::postgres::PostgresLeaseStore;

    use super::Stores;
    use crate::cluster::BoxError;

    /// The server variables; each must be set.
    const VARS: [&str; 3] = [
        "LEASEHOLD_TEST_PG_URL",
        "LEASEHOLD_TEST_S3_ENDPOINT",
        "LEASEHOLD_TEST_S3_BUCKET",
    ];

    fn var(name: &str) -> Result<String, BoxError> {
        std::env::var(name).map_err(|_| {
            format!(
                "--backend postgres-s3 needs {} ({name} is not set): run the drill under \
                 scripts/with-servers.sh, which starts throwaway servers",
                VARS.join(", ")
            )
            .into()
        })
    }

    /// Connects to the table `run_name` (created if absent) and the bucket prefix `run_name/`.
    pub(super) async fn open(run_name: &str) -> Result<Stores, BoxError> {
        let (url, endpoint, bucket) = (var(VARS[0])?, var(VARS[1])?, var(VARS[2])?);
        let leases = PostgresLeaseStore::connect(&url, run_name)
            .await
            .map_err(|e| format!("PostgreSQL at LEASEHOLD_TEST_PG_URL, table {run_name}: {e}"))?;
        // The test server takes any credentials; real ones never reach it.
        let durable = S3Store::new(S3Config {
            endpoint: Some(endpoint.clone()),
            region: "us-east-1".into(),
            bucket: bucket.clone(),
            prefix: format!("{run_name}/"),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            allow_http: true,
        })?;
        Ok(Stores {
            leases: Arc::new(leases),
            durable: Arc::new(durable),
            lease_file: None,
            location: format!(
                "PostgreSQL table {run_name}, s3://{bucket}/{run_name}/ at {endpoint}"
            ),
        })
    }
}

/// Without the features there is nothing to connect to.
#[cfg(not(all(feature = "postgres", feature = "s3")))]
mod servers {
    use super::Stores;
    use crate::cluster::BoxError;

    pub(super) async fn open(_run_name: &str) -> Result<Stores, BoxError> {
        Err(
            "--backend postgres-s3 needs a drill built with the postgres and s3 features: \
             cargo build --example drill --features \"testkit postgres s3\""
                .into(),
        )
    }
}
