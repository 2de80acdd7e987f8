//! Many tip moves in one statement (docs/guarantees.md, "The log tip"): the moves of a
//! `move_tips` call go to the server as arrays, and one `UPDATE … FROM unnest(…)` applies every
//! move of a *round* — a round holds no key twice, so no row is updated twice by one statement.
//! The runtime's batches hold one move per tenant, so they are one round: one statement, one
//! round trip, however many tenants ship at once. A call that names a key again (a retry in
//! the same call, a second move of one tenant) takes one more round, on the same connection,
//! after the first: the moves apply in order.
//!
//! Each move's answer is derived exactly as `move_tip` derives its own: no row returned (the
//! lease is not live for the mover, or its epoch is at or below the floor) is `NotHeld`; a row
//! whose tip is the move's `to` (moved now, or a move of this tenure that landed before) is the
//! record; a row whose tip is elsewhere is `TipMoved`, naming it. `TipOutOfOrder` is decided
//! before the server is asked, and such a move is in no round.

use std::collections::HashMap;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::PostgresLeaseStore;
use super::errors::not_held;
use super::sql::{get, record, to_i64};
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::layout::LogPos;
use crate::lease::{LeaseError, LeaseRecord, TipMove, TipOutcomes, check_tip_step};

/// `move_tip` of the tenure `(key, owner, epoch)`: one compare-and-set statement.
pub(super) async fn move_tip(
    store: &PostgresLeaseStore,
    (key, owner, epoch): (&LeaseKey, &str, u64),
    from: Option<LogPos>,
    to: LogPos,
) -> Result<LeaseRecord, LeaseError> {
    check_tip_step(key, epoch, from, to)?;
    let op = "move_tip";
    let (to_epoch, to_seq) = (to_i64(op, to.epoch)?, to_i64(op, to.seq)?);
    let from_epoch = from.map(|f| to_i64(op, f.epoch)).transpose()?;
    let from_seq = from.map(|f| to_i64(op, f.seq)).transpose()?;
    let extra: [&(dyn ToSql + Sync); 4] = [&to_epoch, &to_seq, &from_epoch, &from_seq];
    let sql = &store.sql.move_tip;
    let after = store
        .compare_and_set(op, sql, (key, owner, epoch), &extra)
        .await?;
    // The statement moves the tip only from `from`; it is at `to` exactly when it moved now
    // or a move of this tenure had landed before (a retry).
    if after.tip == Some(to) {
        return Ok(after);
    }
    Err(LeaseError::TipMoved {
        key: key.to_string(),
        tip: after.tip,
        from,
        to,
    })
}

/// `move_tips`: the moves in order, one statement per round of distinct keys, on one
/// connection under one deadline.
pub(super) async fn move_tips(
    store: &PostgresLeaseStore,
    moves: &[TipMove],
) -> Result<TipOutcomes, LeaseError> {
    let op = "move_tips";
    // Out of order: refused before the server is asked, as `move_tip` does.
    let mut outcomes: Vec<Option<Result<LeaseRecord, LeaseError>>> = moves
        .iter()
        .map(|m| check_tip_step(&m.key, m.epoch, m.from, m.to).err().map(Err))
        .collect();
    let asked: Vec<usize> = (0..moves.len())
        .filter(|&i| outcomes[i].is_none())
        .collect();
    let rounds = rounds(moves, &asked);
    if !rounds.is_empty() {
        // One round for the runtime's batches: a move per tenant.
        let rows = store
            .bounded(op, async {
                let mut lease = store.checkout(op).await?;
                let mut rows = Vec::with_capacity(rounds.len());
                for round in &rounds {
                    let params = RoundParams::of(moves, round)?;
                    rows.push(
                        lease
                            .query(op, &store.sql.move_tips, &params.refs())
                            .await?,
                    );
                }
                lease.keep();
                Ok(rows)
            })
            .await?;
        for (round, rows) in rounds.iter().zip(&rows) {
            answer(moves, round, rows, &mut outcomes)?;
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                Err(LeaseError::Store(StoreError::Backend {
                    op,
                    message: "a move was in no round".to_string(),
                }))
            })
        })
        .collect())
}

/// The moves to ask (indices into the call's moves), split into rounds in which no key comes
/// twice; each move's round is after every earlier move of its key.
pub(super) fn rounds(moves: &[TipMove], asked: &[usize]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for &i in asked {
        let round = seen.entry(moves[i].key.as_str()).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(i);
        *round += 1;
    }
    rounds
}

/// The statement's parameters for one round: the move's index, key, owner, epoch, `from` and
/// `to`, one array each.
pub(super) struct RoundParams {
    idx: Vec<i64>,
    keys: Vec<String>,
    owners: Vec<String>,
    epochs: Vec<i64>,
    from_epochs: Vec<Option<i64>>,
    from_seqs: Vec<Option<i64>>,
    to_epochs: Vec<i64>,
    to_seqs: Vec<i64>,
}

impl RoundParams {
    /// The parameters of the moves `round` of `moves`.
    pub(super) fn of(moves: &[TipMove], round: &[usize]) -> Result<Self, StoreError> {
        let op = "move_tips";
        let mut p = Self {
            idx: Vec::with_capacity(round.len()),
            keys: Vec::with_capacity(round.len()),
            owners: Vec::with_capacity(round.len()),
            epochs: Vec::with_capacity(round.len()),
            from_epochs: Vec::with_capacity(round.len()),
            from_seqs: Vec::with_capacity(round.len()),
            to_epochs: Vec::with_capacity(round.len()),
            to_seqs: Vec::with_capacity(round.len()),
        };
        for &i in round {
            let m = &moves[i];
            p.idx.push(to_i64(op, i as u64)?);
            p.keys.push(m.key.as_str().to_string());
            p.owners.push(m.owner.clone());
            p.epochs.push(to_i64(op, m.epoch)?);
            p.from_epochs
                .push(m.from.map(|f| to_i64(op, f.epoch)).transpose()?);
            p.from_seqs
                .push(m.from.map(|f| to_i64(op, f.seq)).transpose()?);
            p.to_epochs.push(to_i64(op, m.to.epoch)?);
            p.to_seqs.push(to_i64(op, m.to.seq)?);
        }
        Ok(p)
    }

    /// The parameters in the order of the statement's `$1 … $8`.
    pub(super) fn refs(&self) -> [&(dyn ToSql + Sync); 8] {
        [
            &self.idx,
            &self.keys,
            &self.owners,
            &self.epochs,
            &self.from_epochs,
            &self.from_seqs,
            &self.to_epochs,
            &self.to_seqs,
        ]
    }
}

/// The answers of the moves `round` of `moves` from the rows the round's statement returned
/// (each the record after the statement, then the move's index), written into `outcomes`.
pub(super) fn answer(
    moves: &[TipMove],
    round: &[usize],
    rows: &[Row],
    outcomes: &mut [Option<Result<LeaseRecord, LeaseError>>],
) -> Result<(), StoreError> {
    let op = "move_tips";
    let mut after: HashMap<usize, LeaseRecord> = HashMap::with_capacity(rows.len());
    for row in rows {
        let idx: i64 = get(op, row, super::sql::MOVE_INDEX_COLUMN)?;
        let idx = usize::try_from(idx).map_err(|_| StoreError::Backend {
            op,
            message: format!("a move index {idx} that was never sent"),
        })?;
        after.insert(idx, record(op, row)?);
    }
    for &i in round {
        let m = &moves[i];
        outcomes[i] = Some(match after.remove(&i) {
            None => Err(not_held(&m.key, &m.owner, m.epoch)),
            Some(record) if record.tip == Some(m.to) => Ok(record),
            Some(record) => Err(LeaseError::TipMoved {
                key: m.key.to_string(),
                tip: record.tip,
                from: m.from,
                to: m.to,
            }),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{LeaseKey, OrgId, TenantId};
    use crate::layout::LogPos;

    fn mv(tenant: &str, to: u64) -> TipMove {
        TipMove {
            key: LeaseKey::new(
                &OrgId::new("acme").unwrap(),
                &TenantId::new(tenant).unwrap(),
            ),
            owner: "a".into(),
            epoch: 1,
            from: (to > 1).then_some(LogPos {
                epoch: 1,
                seq: to - 1,
            }),
            to: LogPos { epoch: 1, seq: to },
        }
    }

    #[test]
    fn one_move_per_tenant_is_one_round_and_a_key_again_waits_for_the_next() {
        let moves = [
            mv("t1", 1),
            mv("t2", 1),
            mv("t1", 2),
            mv("t3", 1),
            mv("t1", 3),
        ];
        assert_eq!(
            rounds(&moves, &[0, 1, 2, 3, 4]),
            vec![vec![0, 1, 3], vec![2], vec![4]]
        );
        assert_eq!(rounds(&moves, &[1, 3]), vec![vec![1, 3]]);
        assert!(rounds(&moves, &[]).is_empty());
    }
}
