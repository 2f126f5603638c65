//! Pending approvals shared between a waiting turn and whoever answers: the answer can
//! come from the chat that started the turn or from `bx approve` in another terminal;
//! the first answer takes the entry, a second gets "already answered".

use std::collections::HashMap;
use std::time::Duration;

use bx_broker::{Answer, Answered, ApprovalTable, AskRequest, Pending, ScopeKind};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The pending approvals of one daemon.
#[derive(Debug, Default)]
pub struct Approvals {
    table: ApprovalTable,
    waiting: Mutex<HashMap<String, Waiter>>,
}

#[derive(Debug)]
struct Waiter {
    session: String,
    block: String,
    answer: oneshot::Sender<Answer>,
    /// How far, from the first byte, the parts of its arguments asked for so far cover
    /// them without a gap: the seal is given once this reaches the end.
    shown: usize,
}

/// One pending approval, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The entry.
    pub pending: Pending,
    /// The session whose call waits.
    pub session: String,
    /// The whole block the owner sees.
    pub block: String,
}

/// Milliseconds since the Unix epoch: the clock approvals expire by.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Takes an approval out of the table when its waiting future ends.
struct Cleanup<'a> {
    approvals: &'a Approvals,
    id: String,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = self.approvals.table.take(&self.id, now_ms());
        self.approvals.waiting().remove(&self.id);
    }
}

impl Approvals {
    /// An empty table.
    pub fn new() -> Approvals {
        Approvals::default()
    }

    fn waiting(&self) -> MutexGuard<'_, HashMap<String, Waiter>> {
        // Every update is a single insert or remove: a panic elsewhere leaves it whole.
        self.waiting.lock()
    }

    /// Puts `request` in the table under `id` (the one its `ask` record names) and
    /// returns the entry and its block, and a future that resolves to the owner's answer,
    /// or `Expired` after `ttl`. `None` when `id` is taken (one draw in about 887
    /// million per waiting call): the call is then refused.
    pub(crate) fn open(
        &self,
        id: &str,
        session: &str,
        request: AskRequest,
        args: String,
        ttl: Duration,
    ) -> Option<(Pending, String, impl Future<Output = Answer> + use<'_>)> {
        let now = now_ms();
        let pending =
            self.table.insert_as(id.to_owned(), request, args, now, ttl.as_millis() as u64)?;
        let block = bx_broker::render_block(&pending, &pending.request.call.digest, now);
        let (tx, mut rx) = oneshot::channel();
        self.waiting().insert(
            pending.id.clone(),
            Waiter { session: session.to_owned(), block: block.clone(), answer: tx, shown: 0 },
        );
        let id = pending.id.clone();
        let wait = async move {
            // Whatever happens to this future (answered, expired, or dropped with a
            // cancelled turn), the entry leaves the table with it.
            let _cleanup = Cleanup { approvals: self, id: id.clone() };
            match tokio::time::timeout(ttl, &mut rx).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) | Err(_) => match self.table.take(&id, now_ms()) {
                    // Nobody answered in time: the entry goes, as a refusal.
                    Answered::Taken(_)
                    | Answered::Expired(_)
                    | Answered::Unknown
                    | Answered::Unseen(_) => Answer::Expired,
                    // An answer won the race with the timeout: it counts.
                    Answered::AlreadyAnswered => rx.try_recv().unwrap_or(Answer::Expired),
                },
            }
        };
        Some((pending, block, wait))
    }

    /// Waiting approval `id`: its whole arguments, as the call gave them (a block shows a
    /// long one in part), and the code that approves a block shown in part.
    pub fn waiting_entry(&self, id: &str) -> Option<Pending> {
        self.table.get(id, now_ms())
    }

    /// Notes that bytes `start..end` of waiting approval `id`'s arguments were handed
    /// out, and returns its seal once the parts handed out cover them whole, from the
    /// first byte on without a gap: asking for the end alone gives no seal. `None` also
    /// for a block that needs none.
    pub fn shown(&self, id: &str, start: usize, end: usize) -> Option<String> {
        let pending = self.table.get(id, now_ms())?;
        let seal = pending.seal?;
        let mut waiting = self.waiting();
        let waiter = waiting.get_mut(&pending.id)?;
        if start <= waiter.shown {
            waiter.shown = waiter.shown.max(end);
        }
        (waiter.shown >= pending.args.len()).then_some(seal)
    }

    /// Answers approval `id`. Only the first answer counts. An approval of a block shown
    /// in part counts only with the code at the end of its rest (`seen`): without it the
    /// call still waits ([`Answered::Unseen`]).
    pub fn answer(&self, id: &str, answer: Answer, seen: Option<&str>) -> Answered {
        let approving = match &answer {
            Answer::Approve => true,
            Answer::Scoped(s) => s.approve,
            Answer::Refuse(_) | Answer::Expired => false,
        };
        let taken = if approving {
            self.table.take_approving(id, seen, now_ms())
        } else {
            self.table.take(id, now_ms())
        };
        if let Answered::Taken(p) = &taken
            && let Some(waiter) = self.waiting().remove(&p.id)
        {
            // The turn may have been cancelled meanwhile; then nobody needs the answer.
            let _ = waiter.answer.send(answer);
        }
        taken
    }

    /// Answers approval `id` as the wire gives it: approve or refuse (with `reason`),
    /// with a scope as the owner typed it (`args`, `path`, `path=/dir`, `host`; none for
    /// this call only). A scope that does not fit the waiting call is an error, and the
    /// call still waits: only a scope made from the call itself answers it.
    pub fn answer_as(
        &self,
        id: &str,
        approve: bool,
        reason: String,
        scope: Option<&str>,
        seen: Option<&str>,
    ) -> Result<Answered, crate::error::ScopeMisfit> {
        use crate::error::ScopeMisfit;
        let kind = ScopeKind::parse(scope.unwrap_or("call")).map_err(ScopeMisfit)?;
        let answer = match self.table.get(id, now_ms()) {
            Some(p) => bx_broker::scoped_answer(&p.request, &p.args, &kind, approve, reason)
                .map_err(ScopeMisfit)?,
            // Not waiting: answered as any answer is (unknown, expired, answered).
            None if approve => Answer::Approve,
            None => Answer::Refuse(reason),
        };
        Ok(self.answer(id, answer, seen))
    }

    /// Every approval still waiting, oldest first.
    pub fn list(&self) -> Vec<Waiting> {
        let waiting = self.waiting();
        self.table
            .list(now_ms())
            .into_iter()
            .filter_map(|pending| {
                let w = waiting.get(&pending.id)?;
                Some(Waiting { session: w.session.clone(), block: w.block.clone(), pending })
            })
            .collect()
    }
}
