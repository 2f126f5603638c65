//! The slot gate: one request in flight per slot, each session kept on its slot, a FIFO
//! queue per slot. A new turn's request is refused (`Busy`) when the queues are full; a
//! request of a turn already under way (its tool calls ran) always waits its turn, so no
//! turn fails after acting because the next request found no slot.
//!
//! llama-server queues a request pinned to a busy slot without a word and then evicts
//! the waiting conversation's cache; the gate makes that impossible by construction.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::error::InferError;

#[derive(Debug, Default)]
struct State {
    busy: Vec<bool>,
    /// Sessions assigned to each slot (for placing new sessions).
    load: Vec<usize>,
    session_slot: HashMap<String, usize>,
    queues: Vec<VecDeque<oneshot::Sender<()>>>,
    queued: usize,
}

/// The gate for one server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SlotGate {
    state: Arc<Mutex<State>>,
    queue_bound: usize,
}

/// Holds a slot; dropping it (on success, error, cancellation or panic) frees the slot
/// or hands it to the next waiter.
#[derive(Debug)]
pub struct SlotGuard {
    gate: SlotGate,
    slot: usize,
}

impl SlotGuard {
    /// The slot to pin the request to (`id_slot`).
    pub fn slot(&self) -> usize {
        self.slot
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.gate.release(self.slot);
    }
}

impl SlotGate {
    /// A gate for `slots` slots with at most `queue_bound` requests waiting in all.
    pub fn new(slots: usize, queue_bound: usize) -> SlotGate {
        let state = State {
            busy: vec![false; slots],
            load: vec![0; slots],
            session_slot: HashMap::new(),
            queues: (0..slots).map(|_| VecDeque::new()).collect(),
            queued: 0,
        };
        SlotGate { state: Arc::new(Mutex::new(state)), queue_bound }
    }

    /// A poisoned lock (a panic while holding it) is taken over: every field is left
    /// consistent between statements, and refusing all later requests would be worse.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.lock().busy.len()
    }

    /// The slot `session` is kept on (assigned on first use to the least-loaded slot).
    pub fn slot_of(&self, session: &str) -> usize {
        let mut s = self.lock();
        Self::assign(&mut s, session)
    }

    fn assign(s: &mut State, session: &str) -> usize {
        if let Some(slot) = s.session_slot.get(session) {
            return *slot;
        }
        let slot = (0..s.load.len()).min_by_key(|i| (s.load[*i], *i)).unwrap_or(0);
        s.load[slot] += 1;
        s.session_slot.insert(session.to_owned(), slot);
        slot
    }

    /// Puts `session` on `slot` (as remembered from before a restart), so its next request
    /// lands where the server still holds its prompt cache. Ignored when the session is
    /// already placed or the slot does not exist (the server was restarted with fewer).
    pub fn pin(&self, session: &str, slot: usize) {
        let mut s = self.lock();
        if slot < s.load.len() && !s.session_slot.contains_key(session) {
            s.load[slot] += 1;
            s.session_slot.insert(session.to_owned(), slot);
        }
    }

    /// Waits for the session's slot. Returns `Busy` at once when the queue is full.
    pub async fn acquire(&self, session: &str) -> Result<SlotGuard, InferError> {
        self.acquire_as(session, false).await
    }

    /// Waits for the session's slot, in order, whatever the queue holds: for a request
    /// of a turn that was admitted and whose tool calls ran. The caller's deadline bounds
    /// the wait.
    pub async fn acquire_admitted(&self, session: &str) -> Result<SlotGuard, InferError> {
        self.acquire_as(session, true).await
    }

    async fn acquire_as(&self, session: &str, admitted: bool) -> Result<SlotGuard, InferError> {
        let rx = {
            let mut s = self.lock();
            let slot = Self::assign(&mut s, session);
            if !s.busy[slot] {
                s.busy[slot] = true;
                return Ok(SlotGuard { gate: self.clone(), slot });
            }
            if s.queued >= self.queue_bound && !admitted {
                return Err(InferError::Busy { slots: s.busy.len(), queued: s.queued });
            }
            let (tx, rx) = oneshot::channel();
            s.queues[slot].push_back(tx);
            s.queued += 1;
            (rx, slot)
        };
        let (rx, slot) = rx;
        let mut waiting = Waiting { gate: self.clone(), slot, rx: Some(rx) };
        let handed = match waiting.rx.as_mut() {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        // Disarm: from here the guard owns the slot.
        waiting.rx = None;
        if handed {
            Ok(SlotGuard { gate: self.clone(), slot })
        } else {
            Err(InferError::Protocol("slot gate dropped a waiter".into()))
        }
    }

    fn release(&self, slot: usize) {
        let mut s = self.lock();
        // Hand the slot to the first waiter still waiting; a waiter whose request was
        // cancelled has dropped its receiver, so `send` fails and the next one is tried.
        while let Some(tx) = s.queues[slot].pop_front() {
            s.queued -= 1;
            if tx.send(()).is_ok() {
                return;
            }
        }
        s.busy[slot] = false;
    }

    /// How many requests are in flight and waiting: (busy slots, queued).
    pub fn load(&self) -> (usize, usize) {
        let s = self.lock();
        (s.busy.iter().filter(|b| **b).count(), s.queued)
    }
}

/// A request waiting in a slot's queue. If it is cancelled (its future dropped) after
/// the slot was handed to it but before it made a guard, the slot would stay busy for
/// ever; dropping this releases it in that case. Still queued, it just closes its
/// receiver, which `release` skips.
struct Waiting {
    gate: SlotGate,
    slot: usize,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take()
            && rx.try_recv().is_ok()
        {
            self.gate.release(self.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_request_per_slot_fifo_and_busy() {
        let gate = SlotGate::new(1, 2);
        let first = gate.acquire("a").await.unwrap();
        let g2 = gate.clone();
        let second = tokio::spawn(async move { g2.acquire("b").await.map(|g| g.slot()) });
        let g3 = gate.clone();
        tokio::task::yield_now().await;
        let third = tokio::spawn(async move { g3.acquire("c").await.map(|g| g.slot()) });
        tokio::task::yield_now().await;
        while gate.load().1 < 2 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(gate.acquire("d").await, Err(InferError::Busy { .. })));
        drop(first);
        assert_eq!(second.await.unwrap().unwrap(), 0);
        assert_eq!(third.await.unwrap().unwrap(), 0);
        assert_eq!(gate.load(), (0, 0));
    }

    /// Regression (found under load): with the queue full, a turn whose tool calls had
    /// run failed with `inference-busy`. Its next request now waits, in order, behind
    /// those already queued, while a new turn is still refused.
    #[tokio::test]
    async fn an_admitted_request_waits_in_order_when_the_queue_is_full() {
        let gate = SlotGate::new(1, 1);
        let held = gate.acquire("a").await.unwrap();
        let g = gate.clone();
        let queued = tokio::spawn(async move { g.acquire("b").await.map(|_| "b") });
        while gate.load().1 < 1 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(gate.acquire("c").await, Err(InferError::Busy { .. })));
        let g = gate.clone();
        let admitted = tokio::spawn(async move { g.acquire_admitted("d").await.map(|_| "d") });
        while gate.load().1 < 2 {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(queued.await.unwrap().unwrap(), "b");
        assert_eq!(admitted.await.unwrap().unwrap(), "d");
        assert_eq!(gate.load(), (0, 0));
    }

    #[test]
    fn pinned_sessions_keep_their_slot_and_count_as_load() {
        // A session remembered on slot 1 stays there, and a new session goes to slot 0.
        let gate = SlotGate::new(2, 4);
        gate.pin("old", 1);
        gate.pin("old", 0);
        gate.pin("nowhere", 7);
        assert_eq!((gate.slot_of("old"), gate.slot_of("new")), (1, 0));
        assert_eq!(gate.slot_of("nowhere"), 0, "an impossible pin is ignored");
    }

    #[tokio::test]
    async fn sessions_keep_their_slot_and_spread() {
        let gate = SlotGate::new(2, 4);
        let a = gate.slot_of("a");
        let b = gate.slot_of("b");
        assert_ne!(a, b);
        assert_eq!(gate.slot_of("a"), a);
    }

    #[tokio::test]
    async fn cancelled_waiter_does_not_hold_the_slot() {
        let gate = SlotGate::new(1, 4);
        let first = gate.acquire("a").await.unwrap();
        let g2 = gate.clone();
        let waiting = tokio::spawn(async move { g2.acquire("b").await.map(drop) });
        while gate.load().1 < 1 {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        drop(first);
        // The slot is free again, not handed to the cancelled waiter for ever.
        let again =
            tokio::time::timeout(std::time::Duration::from_secs(1), gate.acquire("c")).await;
        assert!(again.is_ok(), "slot stuck after a cancelled waiter");
    }

    #[test]
    fn panic_while_holding_releases_and_poison_is_survived() {
        let gate = SlotGate::new(1, 1);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let g = gate.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = rt.block_on(g.acquire("a")).unwrap();
            let _poison = g.state.lock();
            panic!("boom");
        }));
        assert!(r.is_err());
        assert!(gate.state.is_poisoned());
        assert_eq!(gate.load(), (0, 0));
        assert!(rt.block_on(gate.acquire("a")).is_ok());
    }
}
