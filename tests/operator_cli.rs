//! The operator command, run as a real process against real stores in a temporary directory
//! (docs/operations.md, "The operator command"): every verb, its text and its `--json`
//! document, its exit status; bad arguments and missing stores are refused and touch nothing.
//! The same verbs against PostgreSQL (over TLS) and S3 live in `operator_cli/fleet.rs`, the
//! refusals (bad arguments, missing and shared stores) in `operator_cli/refusals.rs`.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::{DurableStore, LeaseKey, LeaseStore};
use serde_json::Value;

#[cfg(all(feature = "postgres", feature = "s3"))]
#[path = "operator_cli/fleet.rs"]
mod fleet;
#[path = "operator_cli/refusals.rs"]
mod refusals;

/// What one run of the command came to.
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: Output) -> Self {
        Self {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The one JSON document on stdout.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not one JSON document ({e}): {}\n{}",
                self.stdout, self.stderr
            )
        })
    }

    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(
            self.status, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs `leasehold` with `args`.
fn leasehold(args: &[&str]) -> Run {
    Run::of(
        Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap(),
    )
}

/// `--leases` and `--durable` of a fleet's stores, then `args`.
fn on(dir: &Path, args: &[&str]) -> Run {
    let leases = format!("sqlite://{}", dir.join("leases.db").display());
    let durable = dir.join("durable").display().to_string();
    let mut all = vec!["--leases", &leases, "--durable", &durable];
    all.extend_from_slice(args);
    leasehold(&all)
}

/// A fleet whose main tenant has an image and segments above it, handed off (so no replica
/// holds it), and the number of events it holds.
async fn tenant_with_a_log() -> (Fleet, usize) {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    for i in 0..3 {
        insert(&t, &format!("before-{i}")).await.unwrap();
    }
    t.snapshot().await.unwrap();
    for i in 0..2 {
        insert(&t, &format!("after-{i}")).await.unwrap();
    }
    t.handoff().await.unwrap();
    a.sup.close().await.unwrap();
    (fleet, 5)
}

/// A lease held now by `owner`, judged by the host's real clock (as the command judges it).
async fn hold(dir: &Path, key: &LeaseKey, owner: &str) {
    let live = SqliteLeaseStore::open(&dir.join("leases.db")).unwrap();
    live.acquire(key, owner, Duration::from_secs(600))
        .await
        .unwrap();
}

fn k(text: &str) -> LeaseKey {
    LeaseKey::parse(text).unwrap()
}

#[actix_rt::test]
async fn leases_lists_every_lease_as_text_and_json_and_pages() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    hold(dir, &k("acme/held"), "replica-b").await;
    let text = on(dir, &["leases"]).ok().stdout;
    assert!(text.starts_with("TENANT"), "{text}");
    assert!(
        text.contains("acme/held") && text.contains("replica-b"),
        "{text}"
    );
    assert!(text.contains("held, ends in 9m"), "human time: {text}");
    assert!(text.contains(&key().to_string()), "{text}");
    assert!(text.contains("2 leases"), "{text}");
    let doc = on(dir, &["--json", "leases"]).ok().json();
    let leases = doc["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2);
    let held = leases.iter().find(|l| l["key"] == "acme/held").unwrap();
    assert_eq!(held["state"], "held");
    assert_eq!(held["owner"], "replica-b");
    let left = held["expires_in_ms"].as_u64().unwrap();
    assert!(left > 590_000 && left <= 600_000, "{left}");
    assert!(held["expires_at"].as_str().unwrap().ends_with('Z'));
    let tenant = leases.iter().find(|l| l["key"] == key().as_str()).unwrap();
    assert_eq!(tenant["state"], "released", "handed off: {tenant}");
    assert!(tenant["head"]["sha256"].is_string(), "{tenant}");
    assert!(tenant["tip"]["seq"].as_u64().unwrap() >= 2, "{tenant}");
    assert_eq!(doc["next"], Value::Null);
    let first = on(dir, &["--json", "leases", "--limit", "1"]).ok().json();
    assert_eq!(first["leases"].as_array().unwrap().len(), 1);
    let next = first["next"].as_str().unwrap().to_owned();
    let rest = on(dir, &["--json", "leases", "--from", &next]).ok().json();
    assert_eq!(rest["leases"][0]["key"], next.as_str());
    assert_eq!(rest["next"], Value::Null);
}

#[actix_rt::test]
async fn inspect_shows_the_lease_epochs_images_segments_and_the_chain() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    let doc = on(dir, &["--json", "inspect", key().as_str()]).ok().json();
    assert_eq!(doc["key"], key().as_str());
    assert_eq!(doc["lease"]["owner"], "replica-a");
    let images = doc["images"].as_array().unwrap();
    assert_eq!(
        images.iter().filter(|i| i["head"] == true).count(),
        1,
        "{doc}"
    );
    assert!(
        images[0]["sha256"].is_string() && images[0]["log"].is_object(),
        "{doc}"
    );
    assert!(doc["segments"]["count"].as_u64().unwrap() >= 3, "{doc}");
    assert_eq!(
        doc["chain"]["segments"], 2,
        "two batches after the image: {doc}"
    );
    assert_eq!(doc["epochs"][0]["dead"], false);
    assert!(doc["total_bytes"].as_u64().unwrap() > 0);
    assert_eq!(doc["verified"], true, "{doc}");
    let text = on(dir, &["inspect", key().as_str()]).ok().stdout;
    for part in [
        "lease",
        "epochs",
        "images",
        "segments:",
        "chain: from e1:",
        "ok   chain",
    ] {
        assert!(text.contains(part), "{part} in {text}");
    }
    let unknown = on(dir, &["--json", "inspect", "acme/nobody"]);
    assert_eq!(unknown.status, 3, "{}", unknown.stderr);
    assert_eq!(unknown.json()["error"]["status"], "not_found");
}

#[actix_rt::test]
async fn verify_passes_a_sound_tenant_and_fails_a_damaged_segment() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    let doc = on(dir, &["--json", "verify", key().as_str()]).ok().json();
    let verdict = &doc["tenants"][0];
    assert_eq!(verdict["ok"], true, "{doc}");
    let checks: Vec<&str> = verdict["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        checks,
        ["images", "segments", "chain", "restore", "integrity_check"]
    );
    assert_eq!(verdict["checks"][4]["detail"], "ok");
    let all = on(dir, &["verify"]).ok().stdout;
    assert!(all.contains("1 verified, 0 failed"), "{all}");
    // Damage the newest segment in place: its checksum no longer holds.
    let tip = fleet
        .leases
        .inner()
        .read(&key())
        .await
        .unwrap()
        .unwrap()
        .tip
        .unwrap();
    let seg = dir
        .join("durable")
        .join(leasehold::layout::segment_key(&key(), tip));
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let failed = on(dir, &["--json", "verify"]);
    assert_eq!(failed.status, 5, "{}", failed.stderr);
    let doc = failed.json();
    assert_eq!(doc["failed"], 1);
    let bad: Vec<&str> = doc["tenants"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(bad, ["segments", "chain", "restore"], "{doc}");
    let text = on(dir, &["verify", key().as_str()]);
    assert_eq!(text.status, 5);
    assert!(text.stdout.contains("FAIL segments"), "{}", text.stdout);
}

#[actix_rt::test]
async fn sweep_deletes_dead_epochs_of_tenants_never_opened_again_and_nothing_else() {
    let fleet = Fleet::new().await;
    let dir = fleet.dir.path();
    let leases = SqliteLeaseStore::open(&dir.join("leases.db")).unwrap();
    let durable = fleet.durable.inner();
    let (gone, live) = (k("acme/forgotten"), k("acme/live"));
    // `gone` was forgotten at epoch 1; a superseded owner's late upload then landed there.
    let r = leases
        .acquire(&gone, "replica-a", Duration::from_secs(60))
        .await
        .unwrap();
    leases
        .mark_forgotten(&gone, "replica-a", r.epoch)
        .await
        .unwrap();
    leases.release(&gone, "replica-a", r.epoch).await.unwrap();
    for object in [
        "acme/forgotten/e00000001/snap-000009.db",
        "acme/forgotten/e00000002/snap-000001.db",
        "acme/live/e00000001/snap-000001.db",
    ] {
        durable.put_if_absent(object, b"x".to_vec()).await.unwrap();
    }
    leases
        .acquire(&live, "replica-b", Duration::from_secs(60))
        .await
        .unwrap();
    let dry = on(dir, &["--json", "sweep", "--dry-run"]).ok().json();
    assert_eq!(
        (dry["objects"].as_u64(), dry["dry_run"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(
        durable.list("").await.unwrap().len(),
        3,
        "a dry run deletes nothing"
    );
    let run = on(dir, &["sweep", "--put-lifetime", "1h"]).ok();
    assert!(run.stdout.contains("1 objects deleted"), "{}", run.stdout);
    assert!(
        run.stderr.contains("swept 2/2 tenants"),
        "progress: {}",
        run.stderr
    );
    assert!(run.stdout.contains("is not due yet"), "{}", run.stdout);
    assert_eq!(
        durable.list("").await.unwrap(),
        [
            "acme/forgotten/e00000002/snap-000001.db",
            "acme/live/e00000001/snap-000001.db"
        ]
    );
    // Once --put-lifetime has passed since the forget, the erasure is finished and cleared.
    let due = leases.erasures_due(Duration::ZERO, 100).await.unwrap();
    assert_eq!(
        due.len(),
        1,
        "still pending after a sweep before it was due"
    );
    let doc = on(
        dir,
        &["--json", "sweep", "acme/forgotten", "--put-lifetime", "0s"],
    )
    .ok()
    .json();
    assert_eq!(doc["erasures_cleared"][0]["key"], "acme/forgotten", "{doc}");
    assert!(
        leases
            .erasures_due(Duration::ZERO, 100)
            .await
            .unwrap()
            .is_empty()
    );
}

#[actix_rt::test]
async fn forget_erases_a_tenant_no_replica_holds_and_clears_its_erasure() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    assert!(!fleet.stored_of_tenant().await.is_empty());
    let run = on(dir, &["forget", key().as_str(), "--put-lifetime", "1s"]).ok();
    assert!(run.stderr.contains("waiting"), "{}", run.stderr);
    assert!(
        run.stdout.contains("the pending erasure is cleared"),
        "{}",
        run.stdout
    );
    assert!(
        fleet.stored_of_tenant().await.is_empty(),
        "every epoch erased"
    );
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    assert_eq!(
        (record.floor, record.head, record.tip),
        (record.epoch, None, None)
    );
    assert!(record.released, "the command let its lease go");
    let pending = fleet
        .leases
        .inner()
        .erasures_due(Duration::ZERO, 100)
        .await
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    // Without waiting, the erasure stays pending for the fleet.
    let other = k("acme/other");
    hold(dir, &other, "replica-c").await;
    let live = SqliteLeaseStore::open(&dir.join("leases.db")).unwrap();
    live.release(&other, "replica-c", 1).await.unwrap();
    let doc = on(dir, &["--json", "forget", "acme/other", "--no-wait"])
        .ok()
        .json();
    assert_eq!(
        (doc["erasure"].as_str(), doc["floor"].as_u64()),
        (Some("pending"), Some(2))
    );
    let pending = live.erasures_due(Duration::ZERO, 100).await.unwrap();
    assert_eq!(pending.len(), 1);
}

#[actix_rt::test]
async fn forget_refuses_a_held_tenant_naming_the_holder_and_changes_nothing() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    hold(dir, &key(), "replica-b").await;
    let before = fleet.leases.inner().read(&key()).await.unwrap();
    let objects = fleet.stored_of_tenant().await;
    let refused = on(dir, &["forget", key().as_str()]);
    assert_eq!(refused.status, 4, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("held by replica-b"),
        "{}",
        refused.stderr
    );
    let json = on(dir, &["--json", "forget", key().as_str()]);
    assert_eq!(json.status, 4);
    assert_eq!(json.json()["error"]["code"], "LEASEHOLD_LEASE_HELD");
    assert_eq!(fleet.leases.inner().read(&key()).await.unwrap(), before);
    assert_eq!(fleet.stored_of_tenant().await, objects);
}

#[actix_rt::test]
async fn restore_writes_a_plain_file_of_the_latest_state_a_position_or_a_time() {
    let (fleet, events) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    let out = |name: &str| dir.join(name).display().to_string();
    let doc = on(
        dir,
        &[
            "--json",
            "restore",
            key().as_str(),
            "--to",
            &out("latest.db"),
        ],
    )
    .ok()
    .json();
    assert_eq!(
        (doc["target"].as_str(), doc["integrity_check"].as_str()),
        (Some("latest"), Some("ok"))
    );
    assert_eq!(keys_in_file(Path::new(&out("latest.db"))).len(), events);
    assert!(
        !dir.join("latest.db-wal").exists(),
        "a plain file, no -wal beside it"
    );
    let tip = fleet
        .leases
        .inner()
        .read(&key())
        .await
        .unwrap()
        .unwrap()
        .tip
        .unwrap();
    let earlier = format!("e{}:{}", tip.epoch, tip.seq - 1);
    let text = on(
        dir,
        &[
            "restore",
            key().as_str(),
            "--to",
            &out("earlier.db"),
            "--at",
            &earlier,
        ],
    )
    .ok();
    assert!(
        text.stdout.contains("integrity_check: ok"),
        "{}",
        text.stdout
    );
    assert_eq!(
        keys_in_file(Path::new(&out("earlier.db"))).len(),
        events - 1
    );
    let later = an_hour_from_now_in_unix_ms();
    on(
        dir,
        &[
            "restore",
            key().as_str(),
            "--to",
            &out("by-time.db"),
            "--at",
            &later,
        ],
    )
    .ok();
    assert_eq!(keys_in_file(Path::new(&out("by-time.db"))).len(), events);
    let old = on(
        dir,
        &[
            "--json",
            "restore",
            key().as_str(),
            "--to",
            &out("x.db"),
            "--at",
            "2001-01-01T00:00:00Z",
        ],
    );
    assert_eq!(old.status, 3, "{}", old.stderr);
    assert_eq!(
        old.json()["error"]["code"],
        "LEASEHOLD_CLI_OUTSIDE_RETENTION"
    );
    assert!(!dir.join("x.db").exists());
    let exists = on(dir, &["restore", key().as_str(), "--to", &out("latest.db")]);
    assert_eq!(exists.status, 2, "never over a file: {}", exists.stderr);
    assert!(
        exists.stderr.contains("never overwrites"),
        "{}",
        exists.stderr
    );
}

/// An hour from now, in milliseconds since the Unix epoch (a target `--at` takes, beside
/// RFC 3339).
fn an_hour_from_now_in_unix_ms() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (now.as_millis() + 3_600_000).to_string()
}
