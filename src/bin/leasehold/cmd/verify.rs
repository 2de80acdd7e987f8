//! `leasehold verify`: checks what the durable store holds of a tenant (or of every tenant with
//! an image or a log) — every image above the floor against its manifest (size, SHA-256, SQLite
//! header), every segment above the floor against its checksum, the chain from the tip back to
//! the head image's position (what an open would restore, with no fallback to an older image),
//! and a restore of it into a private scratch file that `PRAGMA integrity_check` must pass.
//! Reads only; the exit status says whether every check held.

use leasehold::LeaseKey;
use leasehold::durable::DurableStore;
use leasehold::image::{parse_manifest, verify as verify_image};
use leasehold::layout::{ImageRef, LogPos, image_key, manifest_of, segment_of};
use leasehold::lease::{LeaseRecord, LeaseStore};
use leasehold::log::restore::Fetched;
use leasehold::log::{Segment, fetch_log};
use serde::Serialize;

use super::{Outcome, Scratch, integrity_check, list_all, unknown_tenant};
use crate::exit::{Exit, Failure};
use crate::progress::Progress;
use crate::report::{image_name, pos_name};

/// One check and what it found.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `images`, `segments`, `chain`, `restore`, `integrity_check` (`manifests` in `inspect`).
    pub check: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// What was checked, or what failed.
    pub detail: String,
}

impl Check {
    fn new(check: &'static str, problems: Vec<String>, fine: String) -> Self {
        let ok = problems.is_empty();
        Self {
            check,
            ok,
            detail: if ok { fine } else { problems.join("; ") },
        }
    }
}

/// The verdict on one tenant.
#[derive(Debug, Serialize)]
pub struct TenantVerdict {
    /// The tenant.
    pub key: String,
    /// Whether every check held.
    pub ok: bool,
    /// The log position a restore reaches (the tip).
    pub position: Option<LogPos>,
    /// The image a restore starts from.
    pub image: Option<ImageRef>,
    /// The checks, in order.
    pub checks: Vec<Check>,
}

/// The `--json` document of `verify`.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// Every tenant checked.
    pub tenants: Vec<TenantVerdict>,
    /// How many passed.
    pub verified: usize,
    /// How many failed.
    pub failed: usize,
    /// Tenants with neither an image nor a log (nothing to check).
    pub skipped: usize,
}

/// Verifies `tenant`, or every tenant of the lease store with a head or a tip.
pub async fn run(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    tenant: Option<&LeaseKey>,
) -> Result<Outcome, Failure> {
    let records = match tenant {
        Some(key) => match leases.read(key).await? {
            Some(record) => vec![record],
            None => return Err(unknown_tenant(key)),
        },
        None => every_record(leases).await?,
    };
    let scratch = Scratch::new("verify")?;
    let mut report = VerifyReport {
        tenants: Vec::new(),
        verified: 0,
        failed: 0,
        skipped: 0,
    };
    let progress = Progress::new("verified", "tenants", records.len());
    for (done, record) in records.iter().enumerate() {
        let key = super::key_of(record)?;
        if record.head.is_none() && record.tip.is_none() && tenant.is_none() {
            report.skipped += 1;
        } else {
            let verdict = verify_tenant(durable, &key, record, &scratch).await?;
            match verdict.ok {
                true => report.verified += 1,
                false => report.failed += 1,
            }
            report.tenants.push(verdict);
        }
        progress.set(done + 1);
    }
    progress.finish();
    let exit = if report.failed == 0 {
        Exit::Ok
    } else {
        Exit::VerifyFailed
    };
    let human = human(&report);
    Outcome::new(&report, human, exit)
}

/// Every record of the lease store, page by page.
async fn every_record(leases: &dyn LeaseStore) -> Result<Vec<LeaseRecord>, Failure> {
    let (mut records, mut at) = (Vec::new(), None);
    loop {
        let page = leases.list(at.as_ref(), 500).await?;
        records.extend(page.entries.into_iter().map(|e| e.record));
        match page.next {
            Some(next) => at = Some(next),
            None => return Ok(records),
        }
    }
}

/// Every check of one tenant. A store that fails is the command's failure; a check that fails is
/// the verdict's.
pub async fn verify_tenant(
    durable: &dyn DurableStore,
    key: &LeaseKey,
    record: &LeaseRecord,
    scratch: &Scratch,
) -> Result<TenantVerdict, Failure> {
    let listed = list_all(durable, &key.prefix()).await?;
    let mut checks = vec![
        images_check(durable, key, record.floor, &listed).await?,
        segments_check(durable, key, record.floor, &listed).await?,
    ];
    let (chain, fetched) = chain_check(durable, key, record).await?;
    checks.push(chain);
    let (position, image) = match &fetched {
        Some(f) => (f.tip, f.image.as_ref().map(|(m, _)| m.image_ref())),
        None => (None, None),
    };
    match fetched {
        Some(f) => checks.extend(restore_checks(key, f, scratch).await),
        None => checks.push(Check {
            check: "restore",
            ok: false,
            detail: "not run: the chain failed".into(),
        }),
    }
    Ok(TenantVerdict {
        key: key.to_string(),
        ok: checks.iter().all(|c| c.ok),
        position,
        image,
        checks,
    })
}

/// Every image above the floor against its manifest.
async fn images_check(
    durable: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
    listed: &[String],
) -> Result<Check, Failure> {
    let (mut problems, mut n) = (Vec::new(), 0);
    for object in listed {
        let Some((epoch, seq)) = manifest_of(key, object).filter(|(e, _)| *e > floor) else {
            continue;
        };
        n += 1;
        let name = format!("e{epoch}/{seq}");
        let Some(bytes) = durable.get(object).await? else {
            problems.push(format!("{name}: the manifest vanished"));
            continue;
        };
        let manifest = match parse_manifest(&bytes, key, epoch, seq) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{name}: the manifest does not parse: {e}"));
                continue;
            }
        };
        match durable
            .get_sized(&image_key(key, epoch, seq), manifest.size)
            .await?
        {
            None => problems.push(format!("{name}: the image is missing")),
            Some(image) => {
                if let Err(e) = verify_image(&manifest, &image) {
                    problems.push(format!("{name}: {e}"));
                }
            }
        }
    }
    Ok(Check::new(
        "images",
        problems,
        format!("{n} images match their manifests"),
    ))
}

/// Every segment above the floor against its checksum and the key it lies under.
async fn segments_check(
    durable: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
    listed: &[String],
) -> Result<Check, Failure> {
    let (mut problems, mut n) = (Vec::new(), 0);
    for object in listed {
        let Some(pos) = segment_of(key, object).filter(|p| p.epoch > floor) else {
            continue;
        };
        n += 1;
        let Some(size) = durable.size(object).await? else {
            continue;
        };
        match durable.get_sized(object, size).await? {
            None => problems.push(format!("{}: vanished", pos_name(pos))),
            Some(bytes) => {
                if let Err(e) = Segment::decode(&bytes, key, pos) {
                    problems.push(format!("{}: {e}", pos_name(pos)));
                }
            }
        }
    }
    Ok(Check::new(
        "segments",
        problems,
        format!("{n} segments pass their checksums"),
    ))
}

/// The chain from the tip back to the head image's position, as an open fetches it; a head
/// image that fails its checks (a restore would fall back to an older one) fails it too.
pub async fn chain_check(
    durable: &dyn DurableStore,
    key: &LeaseKey,
    record: &LeaseRecord,
) -> Result<(Check, Option<Fetched>), Failure> {
    let head = record.head.as_ref();
    let fetched = match fetch_log(durable, key, head, record.tip, record.floor).await {
        Ok(f) => f,
        Err(leasehold::log::LogError::Store(e)) => return Err(e.into()),
        Err(e) => {
            return Ok((
                Check::new("chain", vec![e.to_string()], String::new()),
                None,
            ));
        }
    };
    let used = fetched.image.as_ref().map(|(m, _)| m.image_ref());
    let mut problems = Vec::new();
    if let (Some(head), Some(used)) = (head, &used)
        && head != used
    {
        problems.push(format!(
            "the head image {} fails its checks; a restore falls back to {}",
            image_name(head),
            image_name(used)
        ));
    }
    let from = record
        .tip
        .map_or("no tip".into(), |t| format!("the tip {}", pos_name(t)));
    let to = match (&used, fetched.image.as_ref().and_then(|(m, _)| m.log)) {
        (Some(image), Some(at)) => format!("image {} at {}", image_name(image), pos_name(at)),
        (Some(image), None) => format!("image {} (taken without a log)", image_name(image)),
        (None, _) => "an empty database".to_owned(),
    };
    let fine = format!(
        "from {from} to {to}: {} segments, each checked",
        fetched.segments.len()
    );
    Ok((Check::new("chain", problems, fine), Some(fetched)))
}

/// Installs what the chain fetched into a scratch file and runs `PRAGMA integrity_check` on it.
async fn restore_checks(key: &LeaseKey, fetched: Fetched, scratch: &Scratch) -> Vec<Check> {
    let file = scratch
        .path()
        .join(format!("{}.db", key.as_str().replace('/', "_")));
    let installed = tokio::task::spawn_blocking({
        let file = file.clone();
        move || {
            let restored = fetched.install(&file)?;
            let size = std::fs::metadata(&file).map_or(0, |m| m.len());
            Ok::<_, leasehold::log::LogError>((restored, size, integrity_check(&file)))
        }
    })
    .await;
    let (restored, size, integrity) = match installed {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return vec![Check::new("restore", vec![e.to_string()], String::new())],
        Err(e) => return vec![Check::new("restore", vec![e.to_string()], String::new())],
    };
    let _ = std::fs::remove_file(&file);
    let restore = Check::new(
        "restore",
        Vec::new(),
        format!("{} segments applied, {size} bytes", restored.segments),
    );
    let integrity = match integrity {
        Ok(said) if said == "ok" => Check::new("integrity_check", Vec::new(), said),
        Ok(said) => Check::new("integrity_check", vec![said], String::new()),
        Err(e) => Check::new("integrity_check", vec![e], String::new()),
    };
    vec![restore, integrity]
}

/// The text of a verify's report.
fn human(r: &VerifyReport) -> String {
    let mut out = String::new();
    for t in &r.tenants {
        let state = if t.ok { "ok" } else { "FAILED" };
        out.push_str(&format!("{}: {state}\n", t.key));
        for c in &t.checks {
            let mark = if c.ok { "ok  " } else { "FAIL" };
            out.push_str(&format!("  {mark} {:<15} {}\n", c.check, c.detail));
        }
    }
    out.push_str(&format!(
        "{} verified, {} failed, {} with nothing to verify\n",
        r.verified, r.failed, r.skipped
    ));
    out
}
