//! `leasehold`, the operator command line (feature `cli`), on every backend: a SQLite lease file
//! or a PostgreSQL table for the leases, a durable directory or an S3 bucket for the images and
//! segments. Verbs: `leases`, `inspect`, `verify`, `sweep`, `forget`, `restore`. Text by
//! default; `--json` prints one JSON document per invocation (the contract and the exit statuses
//! are in docs/operations.md, "The operator command"). Every command opens existing stores only.
//!
//! Layout (`src/bin/leasehold/`): `args.rs` the command line, `parse.rs` and `time.rs` what its
//! words mean (pure), `stores.rs` opening the stores, `cmd/` one file per verb, `report.rs` the
//! shared pieces of the reports, `exit.rs` the exit statuses, `progress.rs` progress on stderr.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use leasehold::clock::{SystemWallClock, WallClock};

#[path = "leasehold/args.rs"]
mod args;
#[path = "leasehold/cmd.rs"]
mod cmd;
#[path = "leasehold/exit.rs"]
mod exit;
#[path = "leasehold/parse.rs"]
mod parse;
#[path = "leasehold/progress.rs"]
mod progress;
#[path = "leasehold/report.rs"]
mod report;
#[path = "leasehold/stores.rs"]
mod stores;
#[path = "leasehold/time.rs"]
mod time;

use args::{Cli, Command};
use cmd::Outcome;
use exit::{Exit, Failure};

/// Runs the verb the command line names.
async fn run(cli: &Cli) -> Result<Outcome, Failure> {
    let now_unix_ms = SystemWallClock.unix_ms();
    let json = cli.json;
    if let Command::Restore { to, .. } = &cli.command {
        // A bad destination touches nothing: refused before any store is opened.
        leasehold::log::check_destination(to).map_err(|e| Failure::usage(e.to_string()))?;
    }
    let leases = stores::lease_store(cli).await?;
    if let Command::Leases { from, limit } = &cli.command {
        let print = |text: &str| {
            if !json {
                print!("{text}");
            }
        };
        return cmd::leases::run(leases.as_ref(), from.clone(), *limit, now_unix_ms, print).await;
    }
    let durable = stores::durable_store(cli).await?;
    let (leases, durable) = (leases.as_ref(), durable.as_ref());
    match &cli.command {
        Command::Leases { .. } => unreachable!("handled above"),
        Command::Inspect { tenant } => {
            cmd::inspect::run(leases, durable, tenant, now_unix_ms).await
        }
        Command::Verify { tenant } => cmd::verify::run(leases, durable, tenant.as_ref()).await,
        Command::Sweep {
            tenant,
            dry_run,
            put_lifetime,
        } => {
            let args = cmd::sweep::SweepArgs {
                tenant: tenant.clone(),
                dry_run: *dry_run,
                put_lifetime: *put_lifetime,
            };
            cmd::sweep::run(leases, durable, &args).await
        }
        Command::Forget {
            tenant,
            put_lifetime,
            no_wait,
        } => {
            let waiting = |left: std::time::Duration| {
                eprintln!(
                    "waiting {} for puts sent before the forget to land (--put-lifetime), then sweeping again; --no-wait leaves that to the fleet",
                    time::words(left)
                );
            };
            cmd::forget::run(leases, durable, tenant, *put_lifetime, *no_wait, waiting).await
        }
        Command::Restore { tenant, to, at } => {
            cmd::restore::run(leases, durable, tenant, to, *at).await
        }
    }
}

/// Logs of the library on stderr, `RUST_LOG` deciding (default: warnings).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The `--json` document of a failure.
fn failure_json(f: &Failure) -> serde_json::Value {
    serde_json::json!({
        "error": {
            "code": f.code,
            "exit": f.exit.status(),
            "status": f.exit.name(),
            "message": f.message,
        }
    })
}

/// Prints a failure (one JSON document on stdout with `--json`, always a line on stderr) and
/// gives its exit status.
fn fail(f: &Failure, json: bool) -> ExitCode {
    if json {
        println!("{}", failure_json(f));
    }
    eprintln!("leasehold: {}", f.message);
    ExitCode::from(f.exit.status())
}

/// A command line clap refused: its own message, or one JSON document with `--json`.
fn refused_line(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if !json {
        let _ = e.print();
        return ExitCode::from(Exit::Usage.status());
    }
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("bad command line");
    let message = first.trim_start_matches("error: ").to_owned();
    fail(&Failure::usage(message), true)
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let json = raw.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&raw) {
        Ok(cli) => cli,
        Err(e) => return refused_line(e, json),
    };
    init_logs();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&Failure::usage(format!("cannot start: {e}")), cli.json),
    };
    match runtime.block_on(run(&cli)) {
        Ok(outcome) => {
            if cli.json {
                println!("{}", outcome.json);
            } else {
                print!("{}", outcome.human);
            }
            ExitCode::from(outcome.exit.status())
        }
        Err(f) => fail(&f, cli.json),
    }
}
