//! Restoring a tenant from the durable store: the head image, then the segments from the
//! image's log position up to the tip the lease record names (docs/guarantees.md, the change
//! log).
//!
//! ```text
//!  tip ─prev─► seg n-1 ─prev─► … ─prev─► seg k+1 ─prev─► image's position k
//!   (walked back by key, never by a listing; then applied forward, k+1 … tip)
//! ```
//!
//! Every store read happens first ([`fetch_log`]); only when the whole chain is in hand is the
//! local file touched ([`Fetched::install`]). So a store failure or a broken chain leaves the
//! local file as it was, and a segment that fails to apply leaves no file at all — never a
//! state the log does not vouch for.
//!
//! - Never a segment above the tip: the walk starts at the tip, so a zombie's late segment at
//!   `tip + 1` is never read (it is swept).
//! - Never a segment of an epoch at or below the floor: such a step is refused.
//! - The walk must meet the image's position exactly; passing below it is refused.
//!
//! **Memory:** the fetched segments are held until they are applied. Compaction bounds how many
//! lie between the head image and the tip (docs/guarantees.md, the storage bound).
//!
//! **Sizes:** every segment's get has a deadline grown with its size, asked of the store first
//! (a segment's size is in no manifest), and a restore fetches at most [`FETCH_BYTES`] at once
//! (or one larger segment alone), so segments sharing one slow link still arrive in time.

use std::path::Path;

use super::segment::MAX_STORED_LEN;
use super::{LogError, PageSums, Segment, apply, finish};
use crate::deadline::MIN_PUT_BYTES_PER_SEC;
use crate::durable::DurableStore;
use crate::ids::LeaseKey;
use crate::image::{Manifest, fetch_restorable, install_empty, install_image};
use crate::layout::{ImageRef, LogPos, segment_key};

/// What a restore installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The image it started from (the head or, after a fallback, one of its bases); `None` when
    /// the tenant has no image and the log was applied to an empty database.
    pub image: Option<ImageRef>,
    /// The log position the installed file holds: the tip, or the image's own when there was
    /// no tip; `None` when there is no log at all.
    pub position: Option<LogPos>,
    /// The installed file's sums, for the writer that continues the log.
    pub sums: PageSums,
    /// How many segments were applied.
    pub segments: usize,
    /// The log position the image holds (`None`: no image, or one taken without a log).
    pub image_log: Option<LogPos>,
    /// The bytes of the pages the applied segments carried.
    pub segment_bytes: u64,
}

/// Everything a restore needs, fetched and checked, not yet installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The image's manifest and bytes, verified; `None` when the tenant has no head.
    pub image: Option<(Manifest, Vec<u8>)>,
    /// The segments from the one after the image's position up to the tip, oldest first.
    pub segments: Vec<Segment>,
    /// The tip the walk started from.
    pub tip: Option<LogPos>,
}

/// Where a walk back from `tip` starts, towards the image's position `base`: `Ok(None)` when
/// there is nothing to fetch, the refusal as text otherwise.
pub fn walk_start(
    tip: Option<LogPos>,
    base: Option<LogPos>,
    floor: u64,
) -> Result<Option<LogPos>, String> {
    match (tip, base) {
        (None, None) => Ok(None),
        (None, Some(b)) => Err(format!("there is no tip, but the image holds {b}")),
        (Some(t), Some(b)) if t == b => Ok(None),
        (Some(t), Some(b)) if t.seq <= b.seq => Err(format!(
            "the tip {t} does not lie above the image's position {b}"
        )),
        (Some(t), _) => step_to(t, floor),
    }
}

/// The walk's next step after a segment whose `prev` is `prev`: `Ok(None)` when it has met the
/// image's position `base` (or the start of the log, when `base` is `None`).
pub fn walk_step(
    prev: Option<LogPos>,
    base: Option<LogPos>,
    floor: u64,
) -> Result<Option<LogPos>, String> {
    match (prev, base) {
        (None, None) => Ok(None),
        (None, Some(b)) => Err(format!(
            "the log starts before it reaches the image's position {b}"
        )),
        (Some(p), Some(b)) if p == b => Ok(None),
        (Some(p), Some(b)) if p.seq <= b.seq => Err(format!(
            "it passes the image's position {b} at {p} without meeting it"
        )),
        (Some(p), _) => step_to(p, floor),
    }
}

fn step_to(pos: LogPos, floor: u64) -> Result<Option<LogPos>, String> {
    if pos.epoch <= floor {
        return Err(format!(
            "{pos} is at or below the floor {floor} and may not be read"
        ));
    }
    Ok(Some(pos))
}

/// The most bytes of segments a restore fetches at once: what the slowest link a deadline allows
/// for ([`MIN_PUT_BYTES_PER_SEC`], 8 MiB/s) moves in one second. One segment larger than this is
/// fetched alone.
pub const FETCH_BYTES: u64 = MIN_PUT_BYTES_PER_SEC;

/// The most positions whose size a restore asks at once (a size carries no payload; the bound
/// keeps the requests of one restore few).
pub const FETCH_SIZES: u64 = 64;

/// Segments fetched ahead of the walk: the positions just below the one asked for, in the same
/// epoch, fetched together in one *wave*. The walk still takes only what `prev` names, so a
/// segment fetched ahead is used only if it is on the chain; none lies above the position asked
/// for, nor in another epoch.
///
/// A wave is sized by bytes, not by count: the sizes of up to [`FETCH_SIZES`] positions are
/// asked first ([`DurableStore::size`]), then the segments are fetched together while their
/// bytes stay within [`FETCH_BYTES`] (at least the one asked for), each with a deadline grown by
/// the bytes of the **whole wave** ([`DurableStore::get_sized`]): the wave's gets share one
/// link, and on a link of at least 8 MiB/s the wave's bytes are through within that time
/// however the link is shared among them. The wave's bytes are decoded and checked on a
/// blocking thread, never on the caller's (an open runs beside the lease renewals).
#[derive(Default)]
struct Prefetched {
    /// Fetched and not yet taken: the segment, `None` when missing, or why it failed.
    by_pos: std::collections::HashMap<LogPos, Result<Option<Segment>, LogError>>,
}

impl Prefetched {
    /// The segment at `pos`, fetching it in a wave with the positions below it (not below
    /// `lowest`) when it was not fetched already.
    async fn take(
        &mut self,
        store: &dyn DurableStore,
        key: &LeaseKey,
        pos: LogPos,
        lowest: u64,
    ) -> Result<Option<Segment>, LogError> {
        if let Some(found) = self.by_pos.remove(&pos) {
            return found;
        }
        let from = pos.seq.saturating_sub(FETCH_SIZES - 1).max(lowest).max(1);
        let window: Vec<LogPos> = (from..=pos.seq)
            .rev()
            .map(|seq| LogPos {
                epoch: pos.epoch,
                seq,
            })
            .collect();
        let keys: Vec<String> = window.iter().map(|p| segment_key(key, *p)).collect();
        let sized = futures::future::join_all(keys.iter().map(|k| store.size(k))).await;
        let mut sizes = Vec::new();
        for (p, size) in window.into_iter().zip(sized) {
            match size {
                // The position asked for, larger than any segment can be: never fetched.
                Ok(Some(bytes)) if sizes.is_empty() => {
                    sizes.push((p, within_segment_bounds(key, p, bytes)?));
                }
                // One below it, larger than any segment: left to the walk, which refuses it
                // if it asks for it.
                Ok(Some(bytes)) if bytes > MAX_STORED_LEN => break,
                Ok(Some(bytes)) => sizes.push((p, bytes)),
                // The position asked for: missing, or the store failed.
                Ok(None) if sizes.is_empty() => return Ok(None),
                Err(e) if sizes.is_empty() => return Err(e.into()),
                // A position below it that is missing (the chain may step to an older epoch)
                // or whose size failed: fetched when the walk asks for it, if it does.
                _ => break,
            }
        }
        let wave = wave_of(&sizes);
        for (p, found) in fetch_wave(store, key, wave).await? {
            self.by_pos.insert(p, found);
        }
        self.by_pos.remove(&pos).unwrap_or(Ok(None))
    }
}

/// `bytes`, the stored size of the segment at `pos`, when a segment can be that large; else
/// [`LogError::Corrupt`] naming it: an object over [`MAX_STORED_LEN`] under a segment's key is
/// refused before a byte of it is fetched (its get would hold it whole in memory, with a
/// deadline grown by its size).
fn within_segment_bounds(key: &LeaseKey, pos: LogPos, bytes: u64) -> Result<u64, LogError> {
    if bytes > MAX_STORED_LEN {
        return Err(LogError::Corrupt {
            what: segment_key(key, pos),
            reason: format!(
                "it takes {bytes} bytes, larger than any segment can be ({MAX_STORED_LEN})"
            ),
        });
    }
    Ok(bytes)
}

/// The first positions of `sizes` (the one asked for first) whose bytes stay within
/// [`FETCH_BYTES`], at least one; and their bytes.
fn wave_of(sizes: &[(LogPos, u64)]) -> (Vec<LogPos>, u64) {
    let mut bytes = 0u64;
    let mut wave = Vec::new();
    for (p, size) in sizes {
        if !wave.is_empty() && bytes.saturating_add(*size) > FETCH_BYTES {
            break;
        }
        bytes = bytes.saturating_add(*size);
        wave.push(*p);
    }
    (wave, bytes)
}

/// Fetches the segments of one wave at once, each get given the time of the wave's `bytes`, then
/// decodes and checks them on a blocking thread. A segment that failed to fetch other than the
/// first is left out (fetched again if the walk asks for it).
async fn fetch_wave(
    store: &dyn DurableStore,
    key: &LeaseKey,
    (wave, bytes): (Vec<LogPos>, u64),
) -> Result<Vec<(LogPos, Result<Option<Segment>, LogError>)>, LogError> {
    let keys: Vec<String> = wave.iter().map(|p| segment_key(key, *p)).collect();
    let got = futures::future::join_all(keys.iter().map(|k| store.get_sized(k, bytes))).await;
    let fetched: Vec<_> = wave
        .into_iter()
        .zip(got)
        .enumerate()
        .filter(|(i, (_, got))| *i == 0 || got.is_ok())
        .map(|(_, item)| item)
        .collect();
    let key = key.clone();
    decode_off_thread(move || {
        fetched
            .into_iter()
            .map(|(p, got)| (p, decode_found(got, &key, p)))
            .collect()
    })
    .await
}

/// Runs `decode` (SHA-256 and decoding of segments: CPU work in proportion to their bytes) on a
/// blocking thread.
async fn decode_off_thread<T: Send + 'static>(
    decode: impl FnOnce() -> T + Send + 'static,
) -> Result<T, LogError> {
    tokio::task::spawn_blocking(decode)
        .await
        .map_err(|e| LogError::Io(format!("the decoding task failed: {e}")))
}

/// A fetched segment decoded and checked; `None` when it was missing.
fn decode_found(
    got: Result<Option<Vec<u8>>, crate::durable::StoreError>,
    key: &LeaseKey,
    pos: LogPos,
) -> Result<Option<Segment>, LogError> {
    match got? {
        Some(bytes) => Segment::decode(&bytes, key, pos).map(Some),
        None => Ok(None),
    }
}

/// The segment at `pos`, decoded and checked; `None` when it is missing. Its get is given the
/// time of its size, asked first; it is decoded on a blocking thread.
pub(crate) async fn fetch_segment(
    store: &dyn DurableStore,
    key: &LeaseKey,
    pos: LogPos,
) -> Result<Option<Segment>, LogError> {
    let Some(size) = store.size(&segment_key(key, pos)).await? else {
        return Ok(None);
    };
    let size = within_segment_bounds(key, pos, size)?;
    let got = store.get_sized(&segment_key(key, pos), size).await;
    let key = key.clone();
    decode_off_thread(move || decode_found(got, &key, pos)).await?
}

/// Fetches what a restore needs for a tenant whose lease record names `head`, `tip` and
/// `floor`: the image ([`fetch_restorable`], falling back along `base`; a fallback image holds
/// an older position, and the walk then goes further back) and the segments from its position
/// up to `tip`, walked back by `prev`. A missing segment is [`LogError::Corrupt`] naming its
/// key; a chain that does not lead to the image's position, a step to the floor or below, or a
/// tip below the image's position is [`LogError::OutOfChain`]. Reads only; touches nothing.
/// Runs in a span `restore` with the tenant's `key` and the `epoch` of the tip (or the head).
#[tracing::instrument(name = "restore", skip_all, fields(key = %key,
    epoch = tip.map(|t| t.epoch).or(head.map(|h| h.epoch))))]
pub async fn fetch_log(
    store: &dyn DurableStore,
    key: &LeaseKey,
    head: Option<&ImageRef>,
    tip: Option<LogPos>,
    floor: u64,
) -> Result<Fetched, LogError> {
    let image = fetch_restorable(store, key, head, floor).await?;
    let base = image.as_ref().and_then(|(m, _)| m.log);
    let chain = || match tip {
        Some(t) => format!("the log of {key} from tip {t}"),
        None => format!("the log of {key} (no tip)"),
    };
    let out_of_chain = |reason| LogError::OutOfChain {
        what: chain(),
        reason,
    };
    let mut segments = Vec::new();
    let mut next = walk_start(tip, base, floor).map_err(out_of_chain)?;
    let image = match next {
        // Nothing to apply after the image: no segment's `sum_before` checks it.
        None => image_holds_the_tip(store, key, image, tip, floor).await?,
        Some(_) => image,
    };
    let mut ahead = Prefetched::default();
    while let Some(pos) = next {
        let lowest = base.map_or(1, |b| b.seq + 1);
        let Some(seg) = ahead.take(store, key, pos, lowest).await? else {
            return Err(LogError::Corrupt {
                what: segment_key(key, pos),
                reason: format!("the segment is missing from {}", chain()),
            });
        };
        next = walk_step(seg.header.prev, base, floor).map_err(out_of_chain)?;
        segments.push(seg);
    }
    segments.reverse();
    Ok(Fetched {
        image,
        segments,
        tip,
    })
}

/// An image said to hold the tip's position (not beyond its log), with no segment left to apply
/// after it, checked against the tip's segment: its pages must sum to what that segment left.
/// Else its manifest names a position it does not hold (a manifest carries no checksum of its
/// own: one digit of its `log` changed would install an older state as the tip's, silently
/// dropping acknowledged writes) — [`LogError::Corrupt`] naming the manifest. Whenever a segment
/// is applied after the image, its `sum_before` is this check. A tip segment no longer stored,
/// or itself damaged, is no witness: the image is then taken on its manifest's word, as before
/// (a damaged segment the head holds must not cost the open). Sums are computed on a blocking
/// thread; the image is handed back.
async fn image_holds_the_tip(
    store: &dyn DurableStore,
    key: &LeaseKey,
    image: Option<(Manifest, Vec<u8>)>,
    tip: Option<LogPos>,
    floor: u64,
) -> Result<Option<(Manifest, Vec<u8>)>, LogError> {
    let (Some((manifest, _)), Some(tip)) = (&image, tip) else {
        return Ok(image);
    };
    if manifest.beyond_log || manifest.log != Some(tip) || tip.epoch <= floor {
        return Ok(image);
    }
    let seg = match fetch_segment(store, key, tip).await {
        Ok(Some(seg)) => seg,
        // No witness (gone, or itself damaged): the image is the only one of that state, and
        // restores as it did before the check (a damaged tip segment the head already holds
        // costs nothing).
        Ok(None) | Err(LogError::Corrupt { .. }) => return Ok(image),
        Err(e) => return Err(e),
    };
    let Some((manifest, bytes)) = image else {
        return Ok(None);
    };
    let want = seg.header.sum_after;
    let (got, bytes) = decode_off_thread(move || {
        let got = PageSums::of_bytes(&bytes).map(|s| s.total());
        (got, bytes)
    })
    .await?;
    if got != Ok(want) {
        return Err(LogError::Corrupt {
            what: crate::layout::manifest_key(key, manifest.epoch, manifest.seq),
            reason: format!(
                "it says its image holds {tip}, but the image's pages do not sum to what the segment there left ({got:?}, not {want})"
            ),
        });
    }
    Ok(Some((manifest, bytes)))
}

impl Fetched {
    /// Installs the image at `dest` (or clears it when there is none, see
    /// [`install_image`] and [`install_empty`]), applies the segments in order, checking each
    /// one's sums against the file, and fsyncs. A segment that does not apply leaves no file at
    /// `dest` and is the error.
    ///
    /// Blocking (writes and fsyncs): run it with `spawn_blocking`.
    pub fn install(self, dest: &Path) -> Result<Restored, LogError> {
        let segment_bytes: u64 = self
            .segments
            .iter()
            .map(|seg| seg.pages.len() as u64 * u64::from(seg.header.page_size))
            .sum();
        let image_pos = self.image.as_ref().and_then(|(m, _)| m.log);
        let image = self.image.as_ref().map(|(m, _)| m.image_ref());
        match &self.image {
            Some((_, bytes)) => install_image(bytes, dest)?,
            None => install_empty(dest)?,
        }
        let applied = sums_of(dest).and_then(|mut sums| {
            for seg in &self.segments {
                apply(dest, &mut sums, seg)?;
            }
            if !self.segments.is_empty() {
                finish(dest)?;
            }
            Ok(sums)
        });
        let sums = match applied {
            Ok(sums) => sums,
            Err(e) => {
                let _ = install_empty(dest);
                return Err(e);
            }
        };
        Ok(Restored {
            image,
            position: self.tip.or(image_pos),
            sums,
            segments: self.segments.len(),
            image_log: image_pos,
            segment_bytes,
        })
    }
}

/// [`PageSums::of_file`] of `path`, or the empty sums when there is no file.
pub(crate) fn sums_of(path: &Path) -> Result<PageSums, LogError> {
    if !path.exists() {
        return Ok(PageSums::empty());
    }
    PageSums::of_file(path).map_err(|reason| LogError::Corrupt {
        what: path.display().to_string(),
        reason,
    })
}

/// Restores a tenant at `dest`: [`fetch_log`], then [`Fetched::install`] on a blocking thread.
/// On any error before the install, `dest` is as it was.
pub async fn restore_log(
    store: &dyn DurableStore,
    key: &LeaseKey,
    head: Option<&ImageRef>,
    tip: Option<LogPos>,
    floor: u64,
    dest: &Path,
) -> Result<Restored, LogError> {
    let fetched = fetch_log(store, key, head, tip, floor).await?;
    let dest = dest.to_path_buf();
    tokio::task::spawn_blocking(move || fetched.install(&dest))
        .await
        .map_err(|e| LogError::Io(format!("the restore's blocking task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(epoch: u64, seq: u64) -> Option<LogPos> {
        Some(LogPos { epoch, seq })
    }

    #[test]
    fn the_walk_starts_at_the_tip_unless_the_image_holds_it() {
        assert_eq!(walk_start(None, None, 0), Ok(None));
        assert_eq!(walk_start(p(2, 5), p(2, 5), 0), Ok(None));
        assert_eq!(walk_start(p(2, 5), p(1, 3), 0), Ok(p(2, 5)));
        assert_eq!(walk_start(p(2, 5), None, 0), Ok(p(2, 5)));
    }

    #[test]
    fn a_tip_below_or_beside_the_image_or_at_the_floor_is_refused() {
        assert!(walk_start(None, p(1, 3), 0).is_err());
        assert!(walk_start(p(2, 2), p(1, 3), 0).is_err());
        assert!(walk_start(p(2, 3), p(1, 3), 0).is_err());
        assert!(walk_start(p(2, 5), None, 2).is_err());
    }

    #[test]
    fn the_walk_ends_exactly_at_the_images_position() {
        assert_eq!(walk_step(p(1, 3), p(1, 3), 0), Ok(None));
        assert_eq!(walk_step(None, None, 0), Ok(None));
        assert_eq!(walk_step(p(1, 4), p(1, 3), 0), Ok(p(1, 4)));
        assert_eq!(walk_step(p(1, 4), None, 0), Ok(p(1, 4)));
    }

    #[test]
    fn a_wave_is_bounded_by_bytes_and_takes_at_least_the_position_asked_for() {
        let at = |seq| LogPos { epoch: 1, seq };
        let mib = 1 << 20;
        let sizes = [(at(9), 3 * mib), (at(8), 3 * mib), (at(7), 3 * mib)];
        assert_eq!(wave_of(&sizes), (vec![at(9), at(8)], 6 * mib));
        let small: Vec<_> = (1..=64).rev().map(|seq| (at(seq), 4096)).collect();
        assert_eq!(
            wave_of(&small).0.len(),
            64,
            "small segments: as many as were sized"
        );
        let huge = [(at(5), 40 * mib), (at(4), 1)];
        assert_eq!(wave_of(&huge), (vec![at(5)], 40 * mib), "a large one alone");
        assert_eq!(wave_of(&[]), (vec![], 0));
    }

    #[test]
    fn a_walk_that_passes_the_image_or_reaches_the_floor_is_refused() {
        assert!(walk_step(p(2, 3), p(1, 3), 0).is_err());
        assert!(walk_step(p(1, 2), p(1, 3), 0).is_err());
        assert!(walk_step(None, p(1, 3), 0).is_err());
        assert!(walk_step(p(1, 4), None, 1).is_err());
    }
}
