//! Which connections the daemon serves: at most `max_connections` at once, and when all
//! are taken the one idle longest (no turn or call running, no frame half-read) makes
//! room for the newcomer. Past that, a few more are let in that may only answer
//! approvals and list things, so the owner's `bx approve` is answered however many
//! clients hold connections; past those, a newcomer is told the daemon is busy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Connections let in beyond `max_connections` when none can be evicted, each limited
/// to control messages (answer an approval, cancel, list). Without them, `bx approve`
/// would wait behind clients whose turns wait for that very approval.
pub const CONTROL_HEADROOM: usize = 8;

struct Slot {
    /// Tasks (turns, calls) running for the connection, plus a frame being read.
    busy: usize,
    /// Since when it has had nothing to do.
    idle_since: Instant,
    evict: Arc<Notify>,
}

#[derive(Default)]
struct Table {
    next: u64,
    live: HashMap<u64, Slot>,
}

/// The daemon's live connections.
#[derive(Default)]
pub(crate) struct Conns {
    table: Mutex<Table>,
}

/// How a new connection was let in.
pub(crate) enum Admission {
    /// Served in full.
    Full(Ticket),
    /// Served for control messages only.
    ControlOnly(Ticket),
    /// Not served: too many connections, all busy.
    Refused,
}

/// A connection's place in the table; leaving the table when dropped.
pub(crate) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
    /// Notified when the daemon needs this connection's place for a newer one.
    pub(crate) evict: Arc<Notify>,
}

impl Conns {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets a new connection in, evicting the longest-idle one when `max` are live.
    pub(crate) fn admit(self: &Arc<Self>, max: usize) -> Admission {
        let mut t = self.lock();
        let control_only = if t.live.len() < max {
            false
        } else {
            let idle = t.live.iter().filter(|(_, s)| s.busy == 0).min_by_key(|(_, s)| s.idle_since);
            match idle.map(|(id, s)| (*id, Arc::clone(&s.evict))) {
                Some((id, evict)) => {
                    t.live.remove(&id);
                    evict.notify_one();
                    false
                }
                None if t.live.len() < max + CONTROL_HEADROOM => true,
                None => return Admission::Refused,
            }
        };
        t.next += 1;
        let id = t.next;
        let evict = Arc::new(Notify::new());
        t.live.insert(id, Slot { busy: 0, idle_since: Instant::now(), evict: Arc::clone(&evict) });
        let ticket = Ticket { conns: Arc::clone(self), id, evict };
        if control_only { Admission::ControlOnly(ticket) } else { Admission::Full(ticket) }
    }

    #[cfg(test)]
    fn live(&self) -> usize {
        self.lock().live.len()
    }
}

impl Ticket {
    /// Marks the connection busy until the returned guard drops.
    pub(crate) fn busy(&self) -> Busy {
        if let Some(s) = self.conns.lock().live.get_mut(&self.id) {
            s.busy += 1;
        }
        Busy { conns: Arc::clone(&self.conns), id: self.id }
    }

    /// Whether anything is running for the connection.
    pub(crate) fn is_busy(&self) -> bool {
        self.conns.lock().live.get(&self.id).is_some_and(|s| s.busy > 0)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.conns.lock().live.remove(&self.id);
    }
}

/// A connection is busy while one of these lives.
pub(crate) struct Busy {
    conns: Arc<Conns>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(s) = self.conns.lock().live.get_mut(&self.id) {
            s.busy = s.busy.saturating_sub(1);
            if s.busy == 0 {
                s.idle_since = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_idle_makes_room_then_control_headroom_then_refusal() {
        let conns = Arc::new(Conns::default());
        let mut held = Vec::new();
        for _ in 0..2 {
            match conns.admit(2) {
                Admission::Full(t) => held.push(t),
                _ => panic!("room for two"),
            }
        }
        // Both idle: the older is evicted for the newcomer.
        let first_evicted = Arc::clone(&held[0].evict);
        let Admission::Full(third) = conns.admit(2) else { panic!("an idle one makes room") };
        assert_eq!(conns.live(), 2);
        drop(first_evicted);
        // Both live ones busy: control-only headroom, then refusal.
        let _b1 = held[1].busy();
        let _b2 = third.busy();
        let mut control = Vec::new();
        for _ in 0..CONTROL_HEADROOM {
            match conns.admit(2) {
                Admission::ControlOnly(t) => {
                    control.push((t.busy(), t));
                }
                _ => panic!("control headroom"),
            }
        }
        assert!(matches!(conns.admit(2), Admission::Refused));
        drop(control);
        assert!(matches!(conns.admit(2), Admission::ControlOnly(_)));
    }
}
