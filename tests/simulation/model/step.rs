//! The model's dispatch: what each op does to the state, every outcome it may have
//! ([`State::step`] runs it, then what happens after every op: shipments, compaction,
//! periodic images, dead local copies).

use super::{Mode, Outcomes, REPLICAS, Res, State, TTL_MS};
use crate::ops::{At, Op};

impl State {
    pub(super) fn step_calls(&self, op: &Op, ids: &[String]) -> Outcomes {
        let mut s = self.clone();
        let id = |i: usize| ids[i].clone();
        let single = |out: Vec<Res>, s: State| vec![(out, s)];
        match *op {
            Op::Open { r, t } => {
                let out = s.open(r, t);
                single(vec![out], s)
            }
            Op::Write { t, at } => s.reaching(t, at, true, |s, k| vec![s.write(k, id(0))]),
            Op::Read { t, at } => s.reaching(t, at, true, |s, k| vec![s.read(k)]),
            Op::Ticket { t, at } => s.reaching(t, at, true, |s, k| s.ticket(k, id(0))),
            Op::Snapshot { t, at } => s.reaching(t, at, true, |s, k| vec![s.snapshot(k, false)]),
            Op::Handoff { t, at } => s.on(t, at, |s, k| vec![s.handoff(k, false)]),
            Op::Stalled {
                t,
                at,
                handoff: true,
            } => s.on(t, at, |s, k| vec![s.handoff(k, true)]),
            Op::Stalled { t, at, .. } => s.reaching(t, at, true, |s, k| vec![s.snapshot(k, true)]),
            Op::DrainedHandoff {
                t,
                at,
                pause,
                renew,
            } => {
                let ticks = if s.key_of(t, at).is_some_and(|k| s.periodic_images(k)) {
                    vec![false, true]
                } else {
                    vec![false]
                };
                ticks
                    .into_iter()
                    .flat_map(|tick| {
                        s.clone().reaching(t, at, true, |s, k| {
                            s.drained_handoff(k, (pause, renew), (id(0), id(1)), tick)
                        })
                    })
                    .collect()
            }
            Op::RaceHandoffWrite { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) if s.passivated(k) => {
                    // The handoff finds the tenure let go already (`Ok`); the write reopens it.
                    let written = s.write_through(k, id(0));
                    single(vec![written, Res::Ok], s)
                }
                Some(k) => {
                    let k = s.target(k);
                    s.touch(k);
                    s.race_handoff_write(k, id(0))
                }
            },
            Op::RaceHandoffForget { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) if s.passivated(k) => {
                    let forgot = match s.reach(k) {
                        Ok(k) => s.forget(k),
                        Err(refused) => refused,
                    };
                    single(vec![forgot, Res::Ok], s)
                }
                Some(k) => {
                    let k = s.target(k);
                    s.race_handoff_forget(k)
                }
            },
            Op::Abandon { t, at } => s.on(t, at, |s, k| vec![s.abandon(k)]),
            Op::Forget { t, at } => s.reaching(t, at, false, |s, k| vec![s.forget(k)]),
            Op::Advance { ms } => {
                s.pass_time(ms);
                single(vec![Res::Ok], s)
            }
            Op::Passivation { images } => {
                s.passivate_after = Some(super::PASSIVATE_AFTER_MS);
                if images {
                    s.modes = vec![Mode::Images; REPLICAS + 1];
                }
                single(vec![Res::Ok], s)
            }
            Op::Passivate { ms, .. } => {
                s.pass_time(ms);
                single(vec![Res::Ok], s)
            }
            Op::RacePassivate { t, at, ms, with } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped], s),
                Some(k) => s.race_passivate(k, ms, with, id(0)),
            },
            Op::Renew { r } => {
                let out = s.renew(r);
                single(vec![out], s)
            }
            Op::DurableDown(down) => {
                s.durable_down = down;
                single(vec![Res::Ok], s)
            }
            Op::LeaseDown(down) => {
                s.lease_down = down;
                single(vec![Res::Ok], s)
            }
            Op::SlowPuts(_) => single(vec![Res::Ok], s),
            Op::SweepLocal { r } => s.sweep_local(r),
            Op::CorruptHead { t } => {
                let out = match s.tenants[t].head {
                    Some(head) => {
                        if let Some(image) = s.tenants[t].objects.get_mut(&head) {
                            image.corrupt = true;
                        }
                        Res::Ok
                    }
                    None => Res::Skipped,
                };
                single(vec![out], s)
            }
            Op::Late(late) => {
                *s.armed.entry(late).or_default() += 1;
                single(vec![Res::Ok], s)
            }
            Op::Land => {
                s.land_all();
                single(vec![Res::Ok], s)
            }
            Op::LandBeforeRelease => {
                s.land_before_release = true;
                single(vec![Res::Ok], s)
            }
            Op::OpenDuringClose { r, t } => s.open_during_close(r, t),
            Op::Close { r } => s.close_and_restart(r),
            Op::Crash { r } => {
                s.crash(r);
                single(vec![Res::Ok], s)
            }
            Op::LapseInCommit { t, at } => s.on(t, at, |s, k| vec![s.lapse_in_commit(k)]),
            Op::LapseDuringCommit { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped], s),
                Some(k) => s.lapse_during_commit(k, id(0)),
            },
            Op::ForgetDuringUpload { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) => s.forget_during_upload(k),
            },
            Op::ForgetBehindHungPut { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) => {
                    let snap = s.snapshot(k, true);
                    let forgot = s.forget(k);
                    single(vec![snap, forgot], s)
                }
            },
            Op::BlockingRun { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) => s.blocking_run(k, id(0)),
            },
            Op::Periodic => {
                s.periodic = true;
                s.modes = vec![Mode::Images; REPLICAS + 1];
                single(vec![Res::Ok], s)
            }
            Op::Images => {
                s.modes = vec![Mode::Images; REPLICAS + 1];
                single(vec![Res::Ok], s)
            }
            Op::Move { t } => {
                let newest = s.key_of(t, At::Newest);
                let r = newest.map_or(0, |k| (s.tenures[&k].replica + 1) % REPLICAS);
                let handed = match newest {
                    Some(k) => s.handoff(k, false),
                    None => Res::Skipped,
                };
                let opened = s.open(r, t);
                single(vec![handed, opened], s)
            }
            Op::Log { modes, .. } => {
                s.modes[..REPLICAS].copy_from_slice(&modes);
                s.periodic = true;
                s.log_case = true;
                single(vec![Res::Ok], s)
            }
            Op::Age => single(vec![Res::Ok], s),
            Op::BulkWrite { t, at } => s.on(t, at, |s, k| vec![s.write(k, id(0))]),
            Op::ZombieShip { t, at } => match s.key_of(t, at) {
                Some(k) if s.tenures[&k].mode == Mode::Shipped => {
                    let next = (s.tenures[&k].replica + 1) % REPLICAS;
                    s.successor = Some((t, next));
                    *s.armed.entry(crate::ops::Late::MoveTip).or_default() += 1;
                    let w = s.write(k, id(0));
                    s.successor = None;
                    let (o, f) =
                        (s.successor_outcomes.take()).unwrap_or((Res::Skipped, Res::Skipped));
                    single(vec![w, o, f], s)
                }
                _ => single(vec![Res::Skipped; 3], s),
            },
            Op::WriteWhileDown { t, at } => s.on(t, at, |s, k| {
                if !s.logged(k) {
                    return vec![Res::Skipped];
                }
                s.durable_down = true;
                let out = s.write(k, id(0));
                s.ship_pending();
                s.durable_down = false;
                vec![out]
            }),
            Op::Pitr { .. } | Op::Damage { .. } => single(vec![Res::Skipped], s),
            Op::PitrAt { t, target } => {
                let outcomes = s.pitr(t, target);
                outcomes.into_iter().map(|o| (vec![o], s.clone())).collect()
            }
            Op::DamageAt { t, pos, delete } => {
                // A retired segment may be going under retention at that very moment.
                let racing = s.tenants[t]
                    .segments
                    .get(&pos)
                    .is_some_and(|seg| seg.retired);
                let mut gone = s.clone();
                let out = s.damage(t, pos, delete);
                let mut outcomes = vec![(vec![out], s)];
                if racing {
                    gone.tenants[t].segments.remove(&pos);
                    outcomes.push((vec![Res::Skipped], gone));
                }
                outcomes
            }
            Op::Settle => {
                s.lease_down = false;
                s.durable_down = false;
                s.armed.clear();
                s.land_before_release = false;
                s.land_all();
                s.pass_time(TTL_MS + 1);
                single(vec![Res::Ok], s)
            }
        }
    }
}
