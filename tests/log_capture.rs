//! The change log's capture: the pages a commit wrote, read back from the WAL, rebuild the
//! writer's database byte for byte (docs/guarantees.md, the change log; docs/testing.md).

use leasehold::ledger::{Ledger, LedgerOptions, NewEvent};
use leasehold::log::{Changes, PageSums};

/// Applies `changes` to `db` as a restore does: pages in place, then the size.
fn apply(db: &mut Vec<u8>, changes: &Changes) {
    assert_eq!(
        PageSums::of_bytes(db).unwrap().total(),
        changes.sum_before,
        "the changes apply to this state"
    );
    let size = changes.page_size as usize;
    for (pgno, data) in &changes.pages {
        let at = (*pgno as usize - 1) * size;
        if db.len() < at + size {
            db.resize(at + size, 0);
        }
        db[at..at + size].copy_from_slice(data);
    }
    db.resize(changes.db_pages as usize * size, 0);
    assert_eq!(PageSums::of_bytes(db).unwrap().total(), changes.sum_after);
}

fn checkpointed_bytes(ledger: &mut Ledger) -> Vec<u8> {
    ledger.checkpoint().unwrap();
    std::fs::read(ledger.path()).unwrap()
}

#[test]
fn replaying_every_commits_pages_rebuilds_the_database_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger =
        Ledger::open_logged(&path, &LedgerOptions::default(), &PageSums::empty()).unwrap();
    let mut replica = Vec::new();
    let mut shipped = 0;
    let mut take = |ledger: &mut Ledger, replica: &mut Vec<u8>| {
        if let Some(changes) = ledger.take_changes().unwrap() {
            apply(replica, &changes);
            shipped += 1;
        }
    };
    // The open's own pages (a new database, the events table) come with the first changes.
    ledger
        .run(|tx| {
            tx.execute(
                "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, blob BLOB)",
                [],
            )?;
            tx.insert_event(&NewEvent::new("created", "k-0"))
        })
        .unwrap();
    take(&mut ledger, &mut replica);
    let mut state = 7u64;
    for i in 0..400u64 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let roll = (state >> 33) % 10;
        ledger
            .run(|tx| {
                match roll {
                    0..=4 => {
                        tx.execute(
                            "INSERT INTO notes (body, blob) VALUES (?1, zeroblob(?2))",
                            rusqlite::params![format!("note {i}"), (state % 9000) as i64],
                        )?;
                    }
                    5 | 6 => {
                        tx.execute(
                            "UPDATE notes SET body = body || '!' WHERE id % 3 = ?1",
                            [(i % 3) as i64],
                        )?;
                    }
                    7 => {
                        tx.execute("DELETE FROM notes WHERE id % 5 = ?1", [(i % 5) as i64])?;
                    }
                    8 => {
                        tx.insert_event(&NewEvent::new("noted", format!("k-{i}")))?;
                    }
                    _ => {
                        let _: i64 =
                            tx.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?;
                    }
                }
                Ok(())
            })
            .unwrap();
        take(&mut ledger, &mut replica);
        if i % 97 == 0 {
            // A checkpoint restarts the log: the capture follows its new generation.
            ledger.checkpoint().unwrap();
        }
        if i == 200 {
            ledger
                .run(|tx| tx.execute("CREATE INDEX notes_body ON notes (body)", []))
                .unwrap();
            take(&mut ledger, &mut replica);
        }
    }
    let a_read_changes_nothing = ledger.run(|tx| tx.event_count()).unwrap();
    assert!(a_read_changes_nothing > 0);
    assert_eq!(
        ledger.take_changes().unwrap(),
        None,
        "a read writes no page"
    );
    let writer = checkpointed_bytes(&mut ledger);
    assert!(shipped > 300, "{shipped} changes taken");
    assert_eq!(
        replica, writer,
        "the replayed pages are the writer's database"
    );
    assert_eq!(
        ledger.sums().unwrap().total(),
        PageSums::of_bytes(&writer).unwrap().total()
    );
    let check = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    let ok: String = check
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn a_rolled_back_batch_leaves_no_changes_and_a_checkpoint_keeps_what_was_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger =
        Ledger::open_logged(&path, &LedgerOptions::default(), &PageSums::empty()).unwrap();
    let mut replica = Vec::new();
    let first = ledger.take_changes().unwrap().expect("the open's pages");
    apply(&mut replica, &first);
    ledger.begin().unwrap();
    ledger
        .run_savepoint(|tx| tx.execute("CREATE TABLE gone (x)", []))
        .unwrap();
    ledger.rollback().unwrap();
    assert_eq!(ledger.take_changes().unwrap(), None);
    // Two commits, then a checkpoint before they were taken: nothing is lost.
    ledger
        .run(|tx| tx.execute("CREATE TABLE kept (x)", []))
        .unwrap();
    ledger
        .run(|tx| tx.execute("INSERT INTO kept VALUES (1)", []))
        .unwrap();
    ledger.checkpoint().unwrap();
    ledger
        .run(|tx| tx.execute("INSERT INTO kept VALUES (2)", []))
        .unwrap();
    let changes = ledger.take_changes().unwrap().expect("three commits");
    apply(&mut replica, &changes);
    assert_eq!(replica, checkpointed_bytes(&mut ledger));
}

#[test]
fn a_restored_file_that_the_open_does_not_change_needs_no_carried_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    {
        let mut ledger = Ledger::open(&path, &LedgerOptions::default()).unwrap();
        ledger
            .run(|tx| tx.insert_event(&NewEvent::new("x", "k-1")))
            .unwrap();
        ledger.close().unwrap();
    }
    let sums = PageSums::of_file(&path).unwrap();
    let mut ledger = Ledger::open_logged(&path, &LedgerOptions::default(), &sums).unwrap();
    assert_eq!(ledger.take_changes().unwrap(), None);
    ledger
        .run(|tx| tx.insert_event(&NewEvent::new("x", "k-2")))
        .unwrap();
    let changes = ledger.take_changes().unwrap().unwrap();
    assert_eq!(changes.sum_before, sums.total());
    assert!(changes.pages.len() <= 4, "{} pages", changes.pages.len());
}
