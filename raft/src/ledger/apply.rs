//! The one entry point that changes the ledger: [`Ledger::apply`] takes a [`Command`] and hands
//! it to the handler of its concern (runs, claims, leases, completions), then lets readiness
//! settle what the change made decidable.

use std::collections::BTreeSet;

use crate::command::{Command, Event};
use crate::error::LedgerError;

use super::runs::RunRequest;
use super::state::{Claimer, Ledger};

impl Ledger {
    /// Applies one command. On error nothing changed; on success the events describe what did.
    pub fn apply(&mut self, cmd: Command) -> Result<Vec<Event>, LedgerError> {
        let mut ev = Vec::new();
        match cmd {
            Command::SubmitPlan { plan } => self.submit_plan(plan, &mut ev)?,
            Command::StartRun {
                keyspace,
                plan_hash,
                start_nodes,
                description,
                only_start_nodes,
                ts_ms,
            } => {
                let req = RunRequest {
                    keyspace: &keyspace,
                    plan_hash,
                    start_nodes: &start_nodes,
                    description,
                    only_start_nodes,
                };
                self.start_run(req, ts_ms, &mut ev)?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::ClaimTasks {
                keyspace,
                run_id,
                peer,
                worker,
                tasks,
                ts_ms,
            } => {
                let claimer = Claimer {
                    peer,
                    worker,
                    ts_ms,
                };
                self.claim_tasks(&claimer, &keyspace, run_id, tasks, &mut ev)?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::CompleteTasks {
                peer,
                results,
                ts_ms,
            } => {
                let mut touched = BTreeSet::new();
                let mut first_err = None;
                for r in results {
                    let batch = r.task.batch.clone();
                    match self.complete(peer, r, ts_ms, &mut ev) {
                        Ok(()) => {
                            touched.insert(batch.keyspace);
                        }
                        Err(e) => {
                            ev.push(Event::Ignored {
                                batch,
                                reason: e.to_string(),
                            });
                            first_err.get_or_insert(e);
                        }
                    }
                }
                if touched.is_empty()
                    && let Some(e) = first_err
                {
                    return Err(e);
                }
                self.seen(peer, ts_ms, None);
                for ks in touched {
                    self.settle(&ks, ts_ms, &mut ev);
                }
            }
            Command::Heartbeat {
                peer,
                queued,
                ts_ms,
            } => self.seen(peer, ts_ms, Some(queued)),
            Command::ExpireLeases {
                peer,
                silent_since_ms,
                ts_ms,
            } => self.expire(peer, silent_since_ms, ts_ms, &mut ev),
            Command::TransferTasks {
                from,
                to,
                to_worker,
                tasks,
                ts_ms,
            } => {
                let mut first_err = None;
                let mut moved = 0u32;
                for t in tasks {
                    if let Err(e) = self.transfer(from, to, &to_worker, &t, ts_ms) {
                        ev.push(Event::Ignored {
                            batch: t.batch,
                            reason: e.to_string(),
                        });
                        first_err.get_or_insert(e);
                    } else {
                        moved += 1;
                        ev.push(Event::BatchTransferred { task: t, from, to });
                    }
                }
                if moved == 0
                    && let Some(e) = first_err
                {
                    return Err(e);
                }
                // The moved tasks wait in the thief's deque now, not the victim's: the depths
                // are right from this entry on, before either peer's next heartbeat says.
                self.seen(from, ts_ms, None);
                self.seen(to, ts_ms, None);
                if let Some(p) = self.peers.get_mut(&from) {
                    p.queued = p.queued.saturating_sub(moved);
                }
                if let Some(p) = self.peers.get_mut(&to) {
                    p.queued = p.queued.saturating_add(moved);
                }
            }
            Command::RegisterKey { key_id, check } => {
                let already_known = self.key_checks.contains_key(&key_id);
                self.key_checks.entry(key_id).or_insert(check);
                ev.push(Event::KeyRegistered {
                    key_id,
                    already_known,
                });
            }
            Command::ReleaseBatch {
                task,
                reason,
                ts_ms,
            } => {
                self.holder_of(&task)?;
                let b = &task.batch;
                let comment = format!("released: {reason}");
                self.return_to_pool(b, comment, reason, ts_ms, &mut ev)?;
                self.settle(&b.keyspace, ts_ms, &mut ev);
            }
            Command::StopRun {
                keyspace,
                run_id,
                comment,
                ts_ms,
            } => {
                self.stop_run(&keyspace, run_id, comment, ts_ms, &mut ev)?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::DropKeyspace { keyspace } => self.drop_keyspace(&keyspace, &mut ev)?,
            Command::BatchNotices {
                task,
                notices,
                ts_ms,
            } => self.batch_notices(&task, notices, ts_ms)?,
            Command::ClaimBackup {
                task,
                peer,
                worker,
                sealed,
                ts_ms,
            } => {
                let claimer = Claimer {
                    peer,
                    worker,
                    ts_ms,
                };
                self.claim_backup(&task, &claimer, sealed, &mut ev)?;
            }
            Command::Batch { commands } => {
                for c in commands {
                    let refused = match c {
                        Command::Batch { .. } => Some(LedgerError::NestedBatch),
                        c => match self.apply(c) {
                            Ok(events) => {
                                ev.extend(events);
                                None
                            }
                            Err(e) => Some(e),
                        },
                    };
                    ev.push(Event::ProposalApplied { refused });
                }
            }
            Command::SetExecutor { peer, addr } => {
                match addr {
                    Some(a) => self.executors.insert(peer, a),
                    None => self.executors.remove(&peer),
                };
            }
            Command::StartTasks { peer, tasks, ts_ms } => {
                self.seen(peer, ts_ms, None);
                for t in &tasks {
                    if let Err(e) = self.start_task(peer, t) {
                        ev.push(Event::Ignored {
                            batch: t.batch.clone(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
        }
        Ok(ev)
    }
}
