//! `leasehold`, the operator command line.
//!
//! - `leasehold sweep` deletes what superseded owners uploaded into dead epochs (at or below each
//!   tenant's floor), for every tenant of a durable store — also tenants never opened again,
//!   which the runtime's sweep-on-open never reaches (CONTRACT promise 5).
//! - `leasehold lease` prints a tenant's lease record: owner, epoch, expiry, floor, head.
//!
//! Both work on the embedded defaults: a SQLite lease file and a durable directory.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::sweep::sweep_store;
use leasehold::{LeaseKey, LeaseStore};

/// Operator commands for leasehold's stores.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
struct Cli {
    /// The SQLite lease file.
    #[arg(long, global = true, default_value = "leases.db")]
    leases: PathBuf,
    /// The durable directory.
    #[arg(long, global = true, default_value = "durable")]
    durable: PathBuf,
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

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let leases = SqliteLeaseStore::open(&cli.leases)?;
    match cli.command {
        Command::Sweep => {
            let durable = DirStore::open(&cli.durable)?;
            let report = sweep_store(&durable, &leases, |done, total| {
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
            let key = LeaseKey::parse(&key)?;
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
