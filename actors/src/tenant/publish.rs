//! Publishing an image: take a consistent copy off the actor's thread, upload image and
//! manifest, move the head by compare-and-set, and count it only if the lease still holds.
//!
//! One publish at a time per tenant (a lock), so images of one epoch form a chain in order.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use leasehold::clock::duration_ms;
use leasehold::deadline::put_deadline;
use leasehold::image::{self, ImageAt, ImageError, ImageFile, ReadSnapshot};
use leasehold::layout::{ImageRef, LogPos, image_key, manifest_key};
use leasehold::lease::LeaseError;
use leasehold::plan::reconcile::PutOf;
use leasehold::{Error, LeaseKey};
use tokio::sync::{Mutex, watch};

use crate::lease_actor::LeaseCell;
use crate::reconcile::Deadlines;
use crate::runtime::Runtime;

/// Where the tenure's chain of images stands.
#[derive(Debug)]
struct Chain {
    /// The head this tenure restored or last published.
    head: Option<ImageRef>,
    /// The next image's number in this epoch.
    next_seq: u64,
    /// How many of the tenure's committed batches the head holds.
    covers: u64,
    /// The log position the head holds.
    log: Option<LogPos>,
}

/// An image this tenure published.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// The new head.
    pub(crate) image: ImageRef,
    /// Holder-clock time just before the image was taken: every write acknowledged before it
    /// is in the image.
    pub(crate) taken_at_ms: u64,
    /// The log position the image holds.
    pub(crate) log: Option<LogPos>,
    /// The image's size.
    pub(crate) bytes: u64,
}

/// Publishes images of one tenure.
#[derive(Debug)]
pub(crate) struct Publisher {
    /// Stores, clock, replica name.
    rt: Arc<Runtime>,
    /// The tenure's standing.
    cell: Arc<LeaseCell>,
    /// The ledger file images are taken from.
    db_path: PathBuf,
    /// Where image files are written before upload.
    scratch: PathBuf,
    /// The chain, behind the one-publish-at-a-time lock.
    chain: Mutex<Chain>,
    /// What the restore says about the images this tenure takes.
    inherited: Inherited,
}

/// What the tenure's restore says about the images it takes: how they are stamped and whether
/// they hold the log's state at their position.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Inherited {
    /// The newest stamp the restore saw (the tip's segment, the head's manifest): a manifest's
    /// `created_at_ms` is never earlier, so an image is never older than the position it holds
    /// in the eyes of retention and point-in-time restore (docs/guarantees.md, stamps).
    pub(crate) stamp_ms: u64,
    /// The position of a restored image beyond its log with no segment after it: this tenure's
    /// state there is that image's, not the log's, so an image of it taken at that position is
    /// beyond its log too (docs/guarantees.md, point-in-time restore across modes).
    pub(crate) beyond_log_at: Option<LogPos>,
}

/// Records an image published, `started` when it began to be taken.
fn measured(published: &Result<Option<Published>, Error>, started: Instant) {
    if let Ok(Some(p)) = published {
        crate::metrics::image_published(p.bytes, started.elapsed());
    }
}

/// Whether the tip `tip` holds the log position `log`.
fn reaches(tip: Option<LogPos>, log: Option<LogPos>) -> bool {
    match (tip, log) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(t), Some(l)) => t.seq >= l.seq,
    }
}

impl Publisher {
    /// A publisher for the tenure of `cell`, whose chain starts at `head` and whose restore
    /// reached the log position `log` (an image of a ledger without a log holds that position
    /// and whatever was written since).
    pub(crate) fn new(
        rt: Arc<Runtime>,
        cell: Arc<LeaseCell>,
        db_path: PathBuf,
        scratch: PathBuf,
        head: Option<ImageRef>,
        log: Option<LogPos>,
        inherited: Inherited,
    ) -> Self {
        Self {
            rt,
            cell,
            db_path,
            scratch,
            inherited,
            chain: Mutex::new(Chain {
                head,
                next_seq: 1,
                covers: 0,
                log,
            }),
        }
    }

    fn key(&self) -> &LeaseKey {
        &self.cell.key
    }

    fn fenced(&self) -> Error {
        Error::Fenced {
            key: self.key().to_string(),
        }
    }

    /// How many bytes the ledger holds now (file and WAL): what a final image will upload.
    pub(crate) fn ledger_bytes(&self) -> u64 {
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut wal = self.db_path.clone().into_os_string();
        wal.push("-wal");
        size(&self.db_path) + size(std::path::Path::new(&wal))
    }

    /// The head as this tenure knows it: restored or last published.
    pub(crate) async fn head(&self) -> Option<ImageRef> {
        self.chain.lock().await.head.clone()
    }

    /// Takes, uploads and publishes an image of what is committed now, which holds at least
    /// `commits` batches; `None` when the head already holds them (a publish queued behind
    /// another that covered it uploads nothing). `Fenced` when the lease is not held before the
    /// upload or after the head moved: such an image never counts.
    pub(crate) async fn publish(&self, commits: u64) -> Result<Option<Published>, Error> {
        let mut chain = self.chain.lock().await;
        if !self.cell.holds(self.rt.now_ms()) {
            return Err(self.fenced());
        }
        if chain.head.is_some() && chain.covers >= commits {
            return Ok(None);
        }
        let seq = chain.next_seq;
        // A number once tried is never reused: a half-finished upload may have left its image.
        chain.next_seq += 1;
        let taken_at_ms = self.rt.now_ms();
        let started = Instant::now();
        let file = self.take(seq).await?;
        let log = chain.log;
        let published = self
            .finish(&mut chain, seq, file, (commits, 0), log, taken_at_ms, None)
            .await;
        measured(&published, started);
        published
    }

    /// Publishes the image of `snapshot` (a read transaction, with the ledger's page 1 and sums
    /// at that moment, see `ReadSnapshot::write_exact_image`), begun when the log stood at `log`
    /// with at least `commits` batches committed; the head moves to it only once the tip
    /// (`tips`) holds `log`, so the head never names state the log does not hold (promise 4
    /// in docs/guarantees.md). `None` when the head already holds `log` and `commits`. Its
    /// manifest is stamped no earlier than `stamp_floor_ms` (the log's newest stamp).
    pub(crate) async fn publish_at(
        &self,
        (commits, stamp_floor_ms): (u64, u64),
        snapshot: (ReadSnapshot, Vec<u8>, u64),
        log: Option<LogPos>,
        tips: watch::Receiver<Option<LogPos>>,
    ) -> Result<Option<Published>, Error> {
        let mut chain = self.chain.lock().await;
        if !self.cell.holds(self.rt.now_ms()) {
            return Err(self.fenced());
        }
        if chain.head.is_some() && chain.covers >= commits && reaches(chain.log, log) {
            return Ok(None);
        }
        let seq = chain.next_seq;
        chain.next_seq += 1;
        let taken_at_ms = self.rt.now_ms();
        let started = Instant::now();
        let dest = self.scratch_path(seq);
        let (snapshot, page_one, sum) = snapshot;
        let file =
            tokio::task::spawn_blocking(move || snapshot.write_exact_image(&dest, &page_one, sum))
                .await
                .map_err(|e| Error::Closed(format!("image task failed: {e}")))??;
        let counts = (commits, stamp_floor_ms);
        let published = self
            .finish(&mut chain, seq, file, counts, log, taken_at_ms, Some(tips))
            .await;
        measured(&published, started);
        published
    }

    /// Uploads image `seq` holding `log` and at least `commits` batches (its manifest stamped
    /// no earlier than `stamp_floor_ms`), waits (with `tips`) for the tip to hold `log`, and
    /// moves the head.
    ///
    /// The image and its manifest are entered in the replica's ledger before the first put and
    /// leave it only once the head names them: on every other way out (a failed or refused
    /// upload, a log that never reached `log`, a tenure that ended, a head move refused or
    /// unanswered, this future dropped with its actor) the replica's reconciliation keeps them
    /// if the head names them or has moved past them (retention judges them then), and deletes
    /// them otherwise once their puts have settled (docs/guarantees.md, "Reconciling puts of
    /// unknown outcome"). Each put is sent only while the lease holds.
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        chain: &mut Chain,
        seq: u64,
        file: ImageFile,
        (commits, stamp_floor_ms): (u64, u64),
        log: Option<LogPos>,
        taken_at_ms: u64,
        tips: Option<watch::Receiver<Option<LogPos>>>,
    ) -> Result<Option<Published>, Error> {
        let (key, epoch) = (self.key().clone(), self.cell.epoch);
        let size = file.size;
        let bytes = usize::try_from(size).unwrap_or(usize::MAX);
        // The image's put and the manifest's.
        let sd = self.rt.store_deadline;
        let deadlines = Deadlines {
            puts_ms: duration_ms(put_deadline(sd, bytes) + sd),
        };
        let put = PutOf::Image { epoch, seq };
        let tracked = self
            .rt
            .reconciler()
            .track(&self.cell, put, self.rt.now_ms(), deadlines);
        let at = ImageAt {
            key: &key,
            epoch,
            seq,
            base: chain.head.clone(),
            log,
            // Without a log the image holds writes no segment carries; with one, so does the
            // restored state of an image beyond its log until a segment follows it.
            beyond_log: log.is_some() && (tips.is_none() || log == self.inherited.beyond_log_at),
            created_at_ms: self
                .rt
                .wall_ms()
                .max(stamp_floor_ms)
                .max(self.inherited.stamp_ms),
        };
        let holds = || self.cell.holds(self.rt.now_ms());
        let uploaded =
            image::upload_image_checked(self.rt.durable.as_ref(), &at, &file, &holds).await;
        let _ = std::fs::remove_file(&file.path);
        match &uploaded {
            Ok(_) => tracked.answered(),
            // Another writer's object under the key: never ours to take back. Taken at the
            // image, the manifest was never put either.
            Err(ImageError::AlreadyExists { key: taken }) => {
                tracked.not_ours(taken);
                if *taken == image_key(&key, epoch, seq) {
                    tracked.not_ours(&manifest_key(&key, epoch, seq));
                }
            }
            Err(_) => {}
        }
        let image = uploaded?.image_ref();
        if let Some(mut tips) = tips {
            // The segment in flight settles within its own bounds (a put and its tip moves,
            // each under `store_deadline`): wait for it, however slow the store is.
            if tips.wait_for(|tip| reaches(*tip, log)).await.is_err() {
                // The log stopped short of the image's position (it failed, the tenure
                // ended): the head stays where the log can follow it.
                return Err(Error::Unshipped {
                    key: self.key().to_string(),
                    reason: format!(
                        "the log never reached the image's position {log:?}; the image is not published"
                    ),
                });
            }
        }
        // A tenure that ended meanwhile (a lapse after a commit ends it) publishes nothing more:
        // this image may hold a write its caller was told was fenced. No head names it.
        if !self.cell.holds(self.rt.now_ms()) {
            return Err(self.fenced());
        }
        tracked.asking();
        let moved = self
            .rt
            .leases
            .publish_head(self.key(), self.rt.replica.as_str(), epoch, &image)
            .await;
        match &moved {
            Ok(_) => tracked.named(),
            Err(LeaseError::NotHeld { .. }) => {
                // The store says the lease is gone: this tenure never holds again, and the head
                // never named this image.
                self.cell.end();
                tracked.refused();
            }
            Err(LeaseError::Stale { .. }) => tracked.refused(),
            Err(_) => {} // unknown: the move may still land
        }
        moved?;
        if !self.cell.holds(self.rt.now_ms()) {
            return Err(self.fenced());
        }
        chain.head = Some(image.clone());
        chain.covers = chain.covers.max(commits);
        chain.log = log;
        Ok(Some(Published {
            image,
            taken_at_ms,
            log,
            bytes: size,
        }))
    }

    fn scratch_path(&self, seq: u64) -> PathBuf {
        self.scratch
            .join(format!("image-e{:08}-{seq:06}.tmp", self.cell.epoch))
    }

    /// Takes image `seq` into the scratch directory, off the async threads.
    async fn take(&self, seq: u64) -> Result<ImageFile, Error> {
        let db = self.db_path.clone();
        let dest = self.scratch_path(seq);
        tokio::task::spawn_blocking(move || image::take_image(&db, &dest))
            .await
            .map_err(|e| Error::Closed(format!("image task failed: {e}")))?
            .map_err(Error::from)
    }
}
