//! The writer's jobs and how one is applied inside a batch's transaction.

use crate::records::{self, CompensationStep};
use crate::{LeaseRecord, LeaseState};
use palisade_policy::log::merkle::Fetched;
use palisade_policy::log::{self, Head, Signer};
use palisade_policy::receipt::{Entry, ReceiptBody, ReceiptKind, SealedReceipt};
use redb::{ReadableTable, WriteTransaction};
use tokio::sync::oneshot;

use crate::journal::Journal;
use crate::{
    Advance, Attachments, BudgetSpend, BudgetVerdict, Compensation, EscrowUpdate, RcnsPut,
    RcnsPutMode, RcnsRecord, RelayLimits, RelayMessage, RelayPosted, StoreError, WriteIntent,
};

use super::sweep::Sweeper;
use super::tables::{
    escrow_state_is, lease_key, set_lease_state, unavailable, Part, Tables, LOG_HEAD,
};
use super::{rcns, relay};

/// A unit of work for the writer thread, with the channel its answer goes back on.
pub(super) enum Job {
    Advance(WriteIntent, oneshot::Sender<Result<Advance, StoreError>>),
    /// A lease's id and the resource its inverse writes.
    Compensate(
        (String, String),
        oneshot::Sender<Result<Compensation, StoreError>>,
    ),
    Stage {
        lease_id: String,
        record: Option<LeaseRecord>,
        inverse: Option<Vec<u8>>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    Receipt(
        Box<(ReceiptBody, Entry, Attachments)>,
        oneshot::Sender<Result<Option<SealedReceipt>, StoreError>>,
    ),
    EscrowPut(Box<EscrowUpdate>, oneshot::Sender<Result<bool, StoreError>>),
    RelayPost(
        Box<(RelayMessage, RelayLimits)>,
        oneshot::Sender<Result<RelayPosted, StoreError>>,
    ),
    RcnsPut(
        Box<(RcnsRecord, RcnsPutMode)>,
        oneshot::Sender<Result<RcnsPut, StoreError>>,
    ),
    /// SPEC §14: a budget check and spend, or a refund (`Err`: the spent rows).
    Budget(
        Box<Result<Vec<BudgetSpend>, Vec<Vec<u8>>>>,
        oneshot::Sender<Result<BudgetVerdict, StoreError>>,
    ),
    /// Commit the open transaction to redb, so a range read sees every answered change.
    Settle(oneshot::Sender<Result<(), StoreError>>),
}

pub(super) enum Answer {
    Advance(Advance),
    Staged,
    Compensate(Compensation),
    /// `None`: the attached escrow update's expected state did not hold.
    Receipt(Option<Box<SealedReceipt>>),
    EscrowPut(bool),
    RelayPost(RelayPosted),
    RcnsPut(RcnsPut),
    Budget(BudgetVerdict),
    Settle,
}

/// What [`apply`] did: the answers in job order, the log's new head (if the batch had
/// receipts), and the journal record (empty when the batch changed nothing).
pub(super) struct Applied {
    pub(super) answers: Vec<Answer>,
    pub(super) head: Option<Head>,
    pub(super) redo: Vec<u8>,
}

/// A batch's receipt waiting for the batch's checkpoint: where its answer goes, its entry, and
/// what is stored with its envelope.
struct Pending<'b> {
    answer: usize,
    entry: Entry,
    attach: &'b Attachments,
}

/// The receipt log as a batch extends it: the key that signs its checkpoints and its head.
#[derive(Clone, Copy)]
pub(super) struct Tip<'a> {
    pub signer: &'a Signer,
    pub head: &'a Head,
}

/// Applies a batch inside the writer's open transaction and makes it durable with one journal
/// append; returns the answers, the log's new head (if the batch had receipts) and the journal record (empty when the
/// batch changed nothing). On an error the transaction holds part of the batch and must be
/// abandoned (`writer::Open::rebuild`).
pub(super) fn apply(
    wtx: &WriteTransaction,
    journal: &mut Journal,
    log: Tip<'_>,
    sweeper: &mut Sweeper,
    batch: &[Job],
    now_ms: i64,
) -> Result<Applied, StoreError> {
    let Tip { signer, head } = log;
    let mut answers = Vec::with_capacity(batch.len());
    let mut new_head = None;
    let redo = {
        let mut t = Tables::open(wtx, now_ms)?;
        let mut stored_keys = false;
        let mut pending: Vec<Pending<'_>> = Vec::new();
        for job in batch {
            match job {
                Job::Advance(intent, _) => {
                    let resource = intent.resource.as_bytes();
                    let current = t.fence(resource)?;
                    if intent.epoch <= current {
                        answers.push(Answer::Advance(Advance::Stale { current }));
                        continue;
                    }
                    t.set_fence(resource, intent.epoch)?;
                    let id = intent.lease_id.as_str();
                    t.put_lease(
                        &lease_key(id, Part::Record, None),
                        &intent.lease_record.to_bytes(),
                    )?;
                    if let Some(inv) = &intent.inverse {
                        t.put_lease(&lease_key(id, Part::Inverse, None), inv)?;
                    }
                    if let Some(snap) = &intent.snapshot {
                        t.put_lease(&lease_key(id, Part::Snapshot, None), snap)?;
                    }
                    t.put_lease_due(sweeper.lease_due(intent.expires_at_ms), id)?;
                    answers.push(Answer::Advance(Advance::Advanced));
                }
                Job::Compensate((lease_id, resource), _) => {
                    let record_key = lease_key(lease_id, Part::Record, None);
                    let record = t
                        .leases
                        .get(record_key.as_slice())
                        .map_err(unavailable)?
                        .map(|v| LeaseRecord::from_bytes(v.value()))
                        .transpose()?;
                    let answer = match records::compensation_step(record) {
                        CompensationStep::Begin { record } => {
                            let resource = resource.as_bytes();
                            let epoch = t.fence(resource)? + 1;
                            t.set_fence(resource, epoch)?;
                            let done = records::compensated(*record, epoch);
                            t.put_lease(&record_key, &done.to_bytes())?;
                            Compensation::Started { epoch }
                        }
                        CompensationStep::Already => Compensation::AlreadyCompensated,
                        CompensationStep::NotCommitted => Compensation::NotCommitted,
                    };
                    answers.push(Answer::Compensate(answer));
                }
                Job::Stage {
                    lease_id,
                    record,
                    inverse,
                    ..
                } => {
                    if let Some(r) = record {
                        t.put_lease(&lease_key(lease_id, Part::Record, None), &r.to_bytes())?;
                    }
                    if let Some(inv) = inverse {
                        t.put_lease(&lease_key(lease_id, Part::Inverse, None), inv)?;
                    }
                    // A grant's record names its expiry; an inverse staged alone (before its
                    // lease is seen) is kept one retention period from now, so inverses
                    // staged under ids no write ever uses do not pile up.
                    let expires = records::staged_expiry(record.as_ref(), t.now_ms);
                    t.put_lease_due(sweeper.lease_due(expires), lease_id)?;
                    answers.push(Answer::Staged);
                }
                Job::EscrowPut(update, _) => {
                    let ok = escrow_state_is(&t.escrows, update)?;
                    if ok {
                        t.put_escrow(&update.id, &update.record.to_bytes())?;
                        if let Some(exp) = update.expires_at_ms {
                            t.put_escrow_due(sweeper.lease_due(exp), &update.id)?;
                        }
                    }
                    answers.push(Answer::EscrowPut(ok));
                }
                Job::Settle(_) => answers.push(Answer::Settle),
                Job::RelayPost(job, _) => {
                    let (message, limits) = &**job;
                    answers.push(Answer::RelayPost(relay::post(&mut t, message, *limits)?));
                }
                Job::Budget(job, _) => answers.push(Answer::Budget(match &**job {
                    Ok(spends) => super::budgets::spend(&mut t, spends)?,
                    Err(spent) => {
                        super::budgets::refund(&mut t, spent)?;
                        BudgetVerdict::Spent(Vec::new())
                    }
                })),
                Job::RcnsPut(job, _) => {
                    let (record, mode) = &**job;
                    answers.push(Answer::RcnsPut(rcns::store(&mut t, record, *mode)?));
                }
                Job::Receipt(job, _) => {
                    let (body, entry, attach) = &**job;
                    if let Some(update) = &attach.escrow {
                        if !escrow_state_is(&t.escrows, update)? {
                            answers.push(Answer::Receipt(None));
                            continue;
                        }
                        // The new state now, so that a later job of this batch sees it; the
                        // record is written again with the envelope once the batch is sealed.
                        t.put_escrow(&update.id, &records::sealed_escrow(update, &entry.value))?;
                    }
                    let index = head.size + pending.len() as u64;
                    if let (Some(lease_id), ReceiptKind::Interim) = (&body.lease_id, body.kind) {
                        // Sent but not complete: nothing to compensate (SPEC §7).
                        set_lease_state(&mut t, lease_id, LeaseState::Interim)?;
                    }
                    if let Some(lease_id) = &body.lease_id {
                        t.put_lease(&lease_key(lease_id, Part::Entry, Some(index)), &[])?;
                        // A receipt naming a lease the store has no record of (a refused
                        // write's lease is never recorded) schedules its own index entry's
                        // removal; a recorded lease's entries go with the record.
                        let recorded = t
                            .leases
                            .get(lease_key(lease_id, Part::Record, None).as_slice())
                            .map_err(unavailable)?
                            .is_some();
                        if !recorded {
                            t.put_lease_due(sweeper.lease_due(t.now_ms), lease_id)?;
                        }
                    }
                    pending.push(Pending {
                        answer: answers.len(),
                        entry: entry.clone(),
                        attach,
                    });
                    // Replaced by the sealed receipt below.
                    answers.push(Answer::Receipt(None));
                }
            }
        }
        if !pending.is_empty() {
            new_head = Some(seal(&mut t, signer, head, pending, &mut answers, sweeper)?);
            stored_keys |= batch
                .iter()
                .any(|j| matches!(j, Job::Receipt(job, _) if job.2.idempotency.is_some()));
        }
        // A batch of nothing but commit requests changes nothing, sweeps included.
        if !batch.iter().all(Job::is_settle) {
            sweeper.run(&mut t, stored_keys, batch.len())?;
        }
        t.redo
    };
    // The durable point: once the journal holds the batch, it survives a crash.
    if !redo.is_empty() {
        journal.append(&redo.bytes).map_err(unavailable)?;
    }
    Ok(Applied {
        answers,
        head: new_head,
        redo: redo.bytes,
    })
}

/// Integrates the batch's receipts into the log: the entries and new stored hashes, one
/// checkpoint signed over the new tree (the log's head), and each receipt's envelope stored
/// with what it carries and put in its answer.
fn seal(
    t: &mut Tables<'_>,
    signer: &Signer,
    head: &Head,
    pending: Vec<Pending<'_>>,
    answers: &mut [Answer],
    sweeper: &Sweeper,
) -> Result<Head, StoreError> {
    let frontier = log::batch::frontier(head.size);
    let hashes = super::log::read_hashes(&t.hashes, &frontier)?;
    let stored: Fetched = frontier.into_iter().zip(hashes).collect();
    let (targets, entries): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .map(|p| ((p.answer, p.attach), p.entry))
        .unzip();
    let sealed = log::seal::seal(head.size, &stored, entries, signer).map_err(unavailable)?;
    crate::metrics::count_sealed(sealed.receipts.len(), sealed.head.size);
    for (index, hash) in &sealed.hashes {
        t.put_hash(*index, &hash.0)?;
    }
    for ((at, attach), receipt) in targets.into_iter().zip(sealed.receipts) {
        t.put_entry(receipt.index, &receipt.entry)?;
        if let Some(update) = &attach.escrow {
            t.put_escrow(&update.id, &records::sealed_escrow(update, &receipt.value))?;
            if let Some(exp) = update.expires_at_ms {
                t.put_escrow_due(sweeper.lease_due(exp), &update.id)?;
            }
        }
        if let Some(idem) = &attach.idempotency {
            let bytes = records::sealed_outcome(idem, &receipt.value);
            t.put_idempotency(&idem.key, &bytes, idem.expires_ms.max(0) as u64)?;
        }
        if let Some(f) = &attach.freeze {
            t.set_freeze(&f.id, f.record.as_deref())?;
        }
        answers[at] = Answer::Receipt(Some(Box::new(receipt)));
    }
    t.put_meta(LOG_HEAD, &sealed.head.to_bytes())?;
    Ok(sealed.head)
}

impl Job {
    /// Sends a job its answer. `apply` answers each job with its own kind, in order; a
    /// mismatch (a bug) answers with an error rather than a wrong value.
    pub(super) fn answer(self, answer: Answer) {
        let mismatch = || StoreError::Unavailable("the store writer answered out of order".into());
        match (self, answer) {
            (Job::Advance(_, reply), Answer::Advance(a)) => {
                if a == Advance::Advanced {
                    metrics::counter!(crate::metrics::FENCE_ADVANCES).increment(1);
                }
                let _ = reply.send(Ok(a));
            }
            (Job::Receipt(_, reply), Answer::Receipt(r)) => {
                let _ = reply.send(Ok(r.map(|r| *r)));
            }
            (Job::EscrowPut(_, reply), Answer::EscrowPut(done)) => {
                let _ = reply.send(Ok(done));
            }
            (Job::Stage { reply, .. }, Answer::Staged) => {
                let _ = reply.send(Ok(()));
            }
            (Job::Compensate(_, reply), Answer::Compensate(c)) => {
                let _ = reply.send(Ok(c));
            }
            (Job::RelayPost(_, reply), Answer::RelayPost(p)) => {
                let _ = reply.send(Ok(p));
            }
            (Job::RcnsPut(_, reply), Answer::RcnsPut(p)) => {
                let _ = reply.send(Ok(p));
            }
            (Job::Budget(_, reply), Answer::Budget(v)) => {
                let _ = reply.send(Ok(v));
            }
            (Job::Settle(reply), Answer::Settle) => {
                let _ = reply.send(Ok(()));
            }
            (job, _) => job.fail(mismatch()),
        }
    }

    /// Answers the job with `e`.
    pub(super) fn fail(self, e: StoreError) {
        match self {
            Job::Advance(_, reply) => drop(reply.send(Err(e))),
            Job::Receipt(_, reply) => drop(reply.send(Err(e))),
            Job::Stage { reply, .. } => drop(reply.send(Err(e))),
            Job::Compensate(_, reply) => drop(reply.send(Err(e))),
            Job::EscrowPut(_, reply) => drop(reply.send(Err(e))),
            Job::RelayPost(_, reply) => drop(reply.send(Err(e))),
            Job::RcnsPut(_, reply) => drop(reply.send(Err(e))),
            Job::Budget(_, reply) => drop(reply.send(Err(e))),
            Job::Settle(reply) => drop(reply.send(Err(e))),
        }
    }

    pub(super) fn is_settle(&self) -> bool {
        matches!(self, Job::Settle(_))
    }
}
