//! `leasehold`, the operator command line.
//!
//! - `leasehold sweep` deletes what superseded owners uploaded into dead epochs (at or below each
//!   tenant's floor), for every tenant of a durable store — also tenants never opened again,
//!   which the runtime's sweep-on-open never reaches (docs/guarantees.md, promise 5). It goes
//!   page by page, each store call under `--store-deadline-ms`, and shows its progress.
//! - `leasehold lease` prints a tenant's lease record: owner, epoch, expiry, floor, head.
//!
//! Stores: the embedded defaults (a SQLite lease file, a durable directory), or a fleet's
//! (`--pg-url` with the `postgres` feature, `--s3-bucket` with the `s3` feature). Every flag of a
//! fleet store can also come from the environment (`LEASEHOLD_PG_URL`, `LEASEHOLD_S3_BUCKET`, …;
//! see `--help`). See docs/operations.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold::LeaseKey;
use leasehold::deadline::Deadline;
use leasehold::durable::SharedDurableStore;
use leasehold::durable::dir::DirStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::sweep::sweep_store;

/// Operator commands for leasehold's stores.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
struct Cli {
    /// The SQLite lease file (when no `--pg-url` is given).
    #[arg(long, global = true, default_value = "leases.db")]
    leases: PathBuf,
    /// The durable directory (when no `--s3-bucket` is given).
    #[arg(long, global = true, default_value = "durable")]
    durable: PathBuf,
    /// The PostgreSQL lease store, `postgres://user[:password]@host:port/db`.
    #[cfg(feature = "postgres")]
    #[arg(long, global = true, env = "LEASEHOLD_PG_URL", hide_env_values = true)]
    pg_url: Option<String>,
    /// The PostgreSQL lease table.
    #[cfg(feature = "postgres")]
    #[arg(long, global = true, env = "LEASEHOLD_PG_TABLE", default_value = leasehold::lease::postgres::DEFAULT_TABLE)]
    pg_table: String,
    /// The S3 bucket of the durable store.
    #[cfg(feature = "s3")]
    #[arg(long, global = true, env = "LEASEHOLD_S3_BUCKET")]
    s3_bucket: Option<String>,
    /// The key prefix inside the bucket: `""` or whole segments ending with `/`.
    #[cfg(feature = "s3")]
    #[arg(long, global = true, env = "LEASEHOLD_S3_PREFIX", default_value = "")]
    s3_prefix: String,
    /// The S3 endpoint (an S3-compatible server); without it, the usual AWS variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, credentials, …) decide.
    #[cfg(feature = "s3")]
    #[arg(long, global = true, env = "LEASEHOLD_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// The region, with `--s3-endpoint`.
    #[cfg(feature = "s3")]
    #[arg(long, global = true, env = "AWS_REGION", default_value = "us-east-1")]
    s3_region: String,
    /// How long one store call may take, in milliseconds (a listing page, a delete, a read).
    #[arg(long, global = true, default_value_t = 30_000)]
    store_deadline_ms: u64,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Delete every object at or below each tenant's floor.
    Sweep,
    /// Print the lease record of `<org>/<tenant>`.
    Lease {
        /// The tenant's key, `<org>/<tenant>`.
        key: String,
    },
}

type Failure = Box<dyn std::error::Error>;

impl Cli {
    /// The deadline of every store call.
    fn deadline(&self) -> Duration {
        Duration::from_millis(self.store_deadline_ms)
    }

    /// The lease store the flags name, behind the deadline.
    async fn lease_store(&self) -> Result<SharedLeaseStore, Failure> {
        #[cfg(feature = "postgres")]
        if let Some(url) = &self.pg_url {
            use leasehold::lease::postgres::PostgresLeaseStore;
            let store = PostgresLeaseStore::connect(url, &self.pg_table).await?;
            return Ok(Arc::new(Deadline::new(store, self.deadline())?));
        }
        let store = SqliteLeaseStore::open(&self.leases)?;
        Ok(Arc::new(Deadline::new(store, self.deadline())?))
    }

    /// The durable store the flags name, behind the deadline.
    fn durable_store(&self) -> Result<SharedDurableStore, Failure> {
        #[cfg(feature = "s3")]
        if let Some(bucket) = &self.s3_bucket {
            let store = self.s3_store(bucket)?;
            return Ok(Arc::new(Deadline::new(store, self.deadline())?));
        }
        let store = DirStore::open(&self.durable)?;
        Ok(Arc::new(Deadline::new(store, self.deadline())?))
    }

    /// The S3 store of `bucket`: explicit with `--s3-endpoint` (keys from `AWS_ACCESS_KEY_ID`
    /// and `AWS_SECRET_ACCESS_KEY` if set, else the credential chain), else from the usual AWS
    /// variables.
    #[cfg(feature = "s3")]
    fn s3_store(&self, bucket: &str) -> Result<leasehold::durable::s3::S3Store, Failure> {
        use leasehold::durable::s3::{S3Config, S3Store};
        let Some(endpoint) = &self.s3_endpoint else {
            return Ok(S3Store::from_env(bucket, &self.s3_prefix)?);
        };
        Ok(S3Store::new(S3Config {
            endpoint: Some(endpoint.clone()),
            region: self.s3_region.clone(),
            bucket: bucket.to_owned(),
            prefix: self.s3_prefix.clone(),
            access_key_id: std::env::var("AWS_ACCESS_KEY_ID").ok(),
            secret_access_key: std::env::var("AWS_SECRET_ACCESS_KEY").ok(),
            allow_http: endpoint.starts_with("http://"),
        })?)
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let leases = cli.lease_store().await?;
    match &cli.command {
        Command::Sweep => {
            let durable = cli.durable_store()?;
            eprintln!("listing the tenants of the durable store");
            let report = sweep_store(durable.as_ref(), leases.as_ref(), |done, total| {
                if done == total || done % 100 == 0 {
                    eprintln!("swept {done}/{total} tenants");
                }
            })
            .await?;
            println!(
                "{} tenants looked at, {} swept, {} objects deleted, {} foreign keys left alone",
                report.tenants, report.swept_tenants, report.objects, report.foreign_keys
            );
        }
        Command::Lease { key } => {
            let key = LeaseKey::parse(key)?;
            match leases.read(&key).await? {
                Some(record) => println!("{record:#?}"),
                None => println!("{key}: never acquired"),
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::FAILURE
        }
    }
}
