//! Peer choice and peer health (RP-9, RP-10, RP-11): round-robin over a target's API servers,
//! with per-host dial health and a staleness clock for published peer lists.
//!
//! Fixed values (not configuration): a dial (TCP + TLS) has 5 s; 3 consecutive dial failures
//! quarantine the host for 20 s; then exactly one trial dial is let through (half-open) while
//! other requests skip the host; success returns it to rotation, failure quarantines it again.
//! When no host is selectable, [`PeerSet::pick`] says so at once: nobody waits on a dial.
//! A request whose dial failed is retried once on [`PeerSet::pick_other`], another healthy host.
//! A peer list from a watch is trusted for 60 s after the watch drops.
//!
//! Time is `tokio::time::Instant`, so tests drive it with a paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::PeerAddress;

/// How long a dial (TCP connect and TLS handshake) may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Consecutive dial failures that quarantine a host.
pub const QUARANTINE_AFTER_FAILURES: u32 = 3;
/// How long a quarantined host is skipped before its trial dial.
pub const QUARANTINE_DURATION: Duration = Duration::from_secs(20);
/// How long a peer list stays trusted after its watch dropped.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// The health of one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Quarantined,
    HalfOpen,
}

impl Health {
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Quarantined => "quarantined",
            Health::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug, Clone)]
struct HostState {
    addr: PeerAddress,
    failures: u32,
    quarantined_until: Option<Instant>,
    trial_in_flight: bool,
}

impl HostState {
    fn new(addr: PeerAddress) -> Self {
        Self {
            addr,
            failures: 0,
            quarantined_until: None,
            trial_in_flight: false,
        }
    }

    fn health(&self, now: Instant) -> Health {
        match self.quarantined_until {
            None => Health::Healthy,
            Some(until) if now < until => Health::Quarantined,
            Some(_) => Health::HalfOpen,
        }
    }
}

/// Why no peer could be picked (each maps to one 503 reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPeer {
    /// The list is empty.
    Empty,
    /// Every host is quarantined (or half-open with its trial taken).
    AllQuarantined,
    /// The peer watch has been down for longer than [`STALE_AFTER`].
    Stale,
}

impl NoPeer {
    /// The metric reason.
    pub fn reason(&self) -> &'static str {
        match self {
            NoPeer::Empty => "no_peer",
            NoPeer::AllQuarantined => "all_quarantined",
            NoPeer::Stale => "stale_peers",
        }
    }
}

/// A picked host; `trial` when this is the single half-open trial dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub addr: PeerAddress,
    pub trial: bool,
}

/// What happened to a dial, reported back by the connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialOutcome {
    Connected,
    Failed,
}

/// A change of health worth a log line and a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Quarantined { host: String, failures: u32 },
    Recovered { host: String },
    AllQuarantined,
}

struct State {
    hosts: Vec<HostState>,
    /// When the peer watch went down (None while it is up, or for static lists).
    watch_down_since: Option<Instant>,
    all_quarantined_reported: bool,
    /// The list mirrors its source (static lists always; a watch once it published and while
    /// it is up).
    synced: bool,
}

/// The peers of one target and their health.
pub struct PeerSet {
    state: Mutex<State>,
    next: AtomicUsize,
}

impl PeerSet {
    /// A set with these peers (a static list, or the first publication of a watch).
    pub fn new(peers: Vec<PeerAddress>) -> Self {
        Self {
            state: Mutex::new(State {
                hosts: peers.into_iter().map(HostState::new).collect(),
                watch_down_since: None,
                all_quarantined_reported: false,
                synced: true,
            }),
            next: AtomicUsize::new(0),
        }
    }

    /// An empty set waiting for the first publication of a watch (requests fail with
    /// `no_peer` until then).
    pub fn awaiting_publication() -> Self {
        let set = Self::new(Vec::new());
        set.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .synced = false;
        set
    }

    /// Whether the list mirrors its source.
    pub fn is_synced(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .synced
    }

    /// The hosts, in rotation order.
    pub fn hosts(&self) -> Vec<PeerAddress> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.hosts.iter().map(|h| h.addr.clone()).collect()
    }

    /// Replaces the list (a fresh publication): known hosts keep their health; the staleness
    /// clock stops.
    pub fn publish(&self, peers: Vec<PeerAddress>) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::take(&mut s.hosts);
        s.hosts = peers
            .into_iter()
            .map(|addr| {
                old.iter()
                    .find(|h| h.addr == addr)
                    .cloned()
                    .unwrap_or_else(|| HostState::new(addr))
            })
            .collect();
        s.watch_down_since = None;
        s.synced = true;
    }

    /// The peer watch dropped: start the staleness clock (if not running).
    pub fn watch_down(&self) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.watch_down_since.is_none() {
            s.watch_down_since = Some(Instant::now());
        }
        s.synced = false;
    }

    /// Seconds since the watch dropped, if it is down.
    pub fn watch_down_for(&self) -> Option<Duration> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .watch_down_since
            .map(|t| t.elapsed())
    }

    /// The next host to use, round-robin over selectable hosts. Never waits.
    pub fn pick(&self) -> Result<Pick, NoPeer> {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.watch_down_since
            .is_some_and(|t| now.duration_since(t) > STALE_AFTER)
        {
            return Err(NoPeer::Stale);
        }
        let n = s.hosts.len();
        if n == 0 {
            return Err(NoPeer::Empty);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            let h = &mut s.hosts[(start + i) % n];
            match h.health(now) {
                Health::Healthy => {
                    return Ok(Pick {
                        addr: h.addr.clone(),
                        trial: false,
                    });
                }
                Health::HalfOpen if !h.trial_in_flight => {
                    h.trial_in_flight = true;
                    return Ok(Pick {
                        addr: h.addr.clone(),
                        trial: true,
                    });
                }
                _ => {}
            }
        }
        Err(NoPeer::AllQuarantined)
    }

    /// A healthy host other than `failed`, for the one retry of a request whose dial failed
    /// (never a half-open trial; `None` when there is no such host or the list is stale).
    pub fn pick_other(&self, failed: &PeerAddress) -> Option<Pick> {
        let now = Instant::now();
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.watch_down_since
            .is_some_and(|t| now.duration_since(t) > STALE_AFTER)
        {
            return None;
        }
        let n = s.hosts.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &s.hosts[(start + i) % n])
            .find(|h| &h.addr != failed && h.health(now) == Health::Healthy)
            .map(|h| Pick {
                addr: h.addr.clone(),
                trial: false,
            })
    }

    /// Lets another request be the trial of `addr` when this one ended without an outcome (it
    /// was cancelled before its connection answered): health does not change.
    pub fn release_trial(&self, addr: &PeerAddress) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = s.hosts.iter_mut().find(|h| &h.addr == addr) {
            h.trial_in_flight = false;
        }
    }

    /// Records a dial's outcome for `addr`; returns the transitions it caused.
    pub fn report(&self, addr: &PeerAddress, outcome: DialOutcome) -> Vec<Transition> {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        let Some(h) = s.hosts.iter_mut().find(|h| &h.addr == addr) else {
            return out;
        };
        let was = h.health(now);
        match outcome {
            DialOutcome::Connected => {
                h.failures = 0;
                h.trial_in_flight = false;
                if h.quarantined_until.take().is_some() {
                    out.push(Transition::Recovered {
                        host: addr.to_string(),
                    });
                }
            }
            DialOutcome::Failed => {
                h.failures += 1;
                let trial_failed = was == Health::HalfOpen;
                h.trial_in_flight = false;
                if trial_failed
                    || (was == Health::Healthy && h.failures >= QUARANTINE_AFTER_FAILURES)
                {
                    h.quarantined_until = Some(now + QUARANTINE_DURATION);
                    out.push(Transition::Quarantined {
                        host: addr.to_string(),
                        failures: h.failures,
                    });
                }
            }
        }
        let all = !s.hosts.is_empty() && s.hosts.iter().all(|h| h.health(now) != Health::Healthy);
        if all && !s.all_quarantined_reported {
            out.push(Transition::AllQuarantined);
        }
        s.all_quarantined_reported = all;
        out
    }

    /// Count of hosts per health state, for the `vcluster_proxy_peers` gauge.
    pub fn census(&self) -> [(Health, usize); 3] {
        let now = Instant::now();
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let count = |want: Health| s.hosts.iter().filter(|h| h.health(now) == want).count();
        [
            (Health::Healthy, count(Health::Healthy)),
            (Health::Quarantined, count(Health::Quarantined)),
            (Health::HalfOpen, count(Health::HalfOpen)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> PeerAddress {
        PeerAddress {
            host: "127.0.0.1".into(),
            port,
        }
    }

    fn fail(set: &PeerSet, port: u16, times: u32) -> Vec<Transition> {
        (0..times)
            .flat_map(|_| set.report(&addr(port), DialOutcome::Failed))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn requests_alternate_between_healthy_peers() {
        let set = PeerSet::new(vec![addr(1), addr(2)]);
        let picks: Vec<u16> = (0..4).map(|_| set.pick().unwrap().addr.port).collect();
        assert_eq!(picks, [1, 2, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn three_consecutive_dial_failures_quarantine_a_host_for_twenty_seconds() {
        let set = PeerSet::new(vec![addr(1), addr(2)]);
        assert!(fail(&set, 1, 2).is_empty(), "two failures are not enough");
        set.report(&addr(1), DialOutcome::Connected);
        assert!(fail(&set, 1, 2).is_empty(), "a success resets the count");
        assert_eq!(
            fail(&set, 1, 1),
            [Transition::Quarantined {
                host: "127.0.0.1:1".into(),
                failures: 3
            }]
        );
        for _ in 0..10 {
            assert_eq!(
                set.pick().unwrap().addr.port,
                2,
                "the quarantined host is skipped"
            );
        }
        tokio::time::advance(QUARANTINE_DURATION - Duration::from_millis(1)).await;
        assert_eq!(set.pick().unwrap().addr.port, 2);
        assert_eq!(set.census()[1], (Health::Quarantined, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_quarantine_exactly_one_trial_dial_is_let_through() {
        let set = PeerSet::new(vec![addr(1)]);
        fail(&set, 1, 3);
        assert_eq!(
            set.pick(),
            Err(NoPeer::AllQuarantined),
            "fails at once, no dial"
        );
        tokio::time::advance(QUARANTINE_DURATION).await;
        assert_eq!(set.census()[2], (Health::HalfOpen, 1));
        assert_eq!(
            set.pick(),
            Ok(Pick {
                addr: addr(1),
                trial: true
            })
        );
        // While the trial is in flight, others fail fast.
        assert_eq!(set.pick(), Err(NoPeer::AllQuarantined));
        assert_eq!(set.pick(), Err(NoPeer::AllQuarantined));
        // The trial succeeds: back in rotation.
        assert_eq!(
            set.report(&addr(1), DialOutcome::Connected),
            [Transition::Recovered {
                host: "127.0.0.1:1".into()
            }]
        );
        assert_eq!(
            set.pick(),
            Ok(Pick {
                addr: addr(1),
                trial: false
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_trial_released_without_an_outcome_lets_the_next_request_be_the_trial() {
        let set = PeerSet::new(vec![addr(1)]);
        fail(&set, 1, 3);
        tokio::time::advance(QUARANTINE_DURATION).await;
        assert!(set.pick().unwrap().trial);
        assert_eq!(set.pick(), Err(NoPeer::AllQuarantined));
        set.release_trial(&addr(1));
        assert_eq!(set.census()[2], (Health::HalfOpen, 1), "health unchanged");
        assert!(set.pick().unwrap().trial, "one trial again");
        assert_eq!(set.pick(), Err(NoPeer::AllQuarantined));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_trial_quarantines_again_at_once() {
        let set = PeerSet::new(vec![addr(1), addr(2)]);
        fail(&set, 1, 3);
        tokio::time::advance(QUARANTINE_DURATION).await;
        let trial = (0..2)
            .map(|_| set.pick().unwrap())
            .find(|p| p.trial)
            .unwrap();
        assert_eq!(trial.addr, addr(1));
        assert_eq!(
            fail(&set, 1, 1),
            [Transition::Quarantined {
                host: "127.0.0.1:1".into(),
                failures: 4
            }]
        );
        for _ in 0..4 {
            assert_eq!(set.pick().unwrap().addr.port, 2);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn all_hosts_quarantined_is_reported_once_and_fails_fast() {
        let set = PeerSet::new(vec![addr(1), addr(2)]);
        fail(&set, 1, 3);
        let t = fail(&set, 2, 3);
        assert!(t.contains(&Transition::AllQuarantined), "{t:?}");
        assert!(
            !fail(&set, 2, 1).contains(&Transition::AllQuarantined),
            "reported once"
        );
        let started = Instant::now();
        assert_eq!(set.pick(), Err(NoPeer::AllQuarantined));
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_goes_to_another_healthy_host_never_to_a_trial_or_the_failed_one() {
        let set = PeerSet::new(vec![addr(1), addr(2), addr(3)]);
        for _ in 0..6 {
            assert_ne!(set.pick_other(&addr(1)).unwrap().addr, addr(1));
        }
        fail(&set, 2, 3);
        tokio::time::advance(QUARANTINE_DURATION).await;
        // 2 is half-open: its trial is for ordinary requests, not for retries.
        for _ in 0..4 {
            assert_eq!(
                set.pick_other(&addr(1)),
                Some(Pick {
                    addr: addr(3),
                    trial: false
                })
            );
        }
        fail(&set, 3, 3);
        assert_eq!(set.pick_other(&addr(1)), None);
        assert_eq!(PeerSet::new(vec![addr(1)]).pick_other(&addr(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_list_is_trusted_for_sixty_seconds_after_its_watch_drops() {
        let set = PeerSet::new(vec![addr(1)]);
        set.watch_down();
        tokio::time::advance(STALE_AFTER).await;
        assert!(set.pick().is_ok(), "still trusted at 60 s");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(set.pick(), Err(NoPeer::Stale));
        // A publication restores service at once and keeps known hosts' health.
        fail(&set, 1, 3);
        set.publish(vec![addr(1), addr(2)]);
        assert_eq!(set.pick().unwrap().addr.port, 2);
        assert_eq!(set.watch_down_for(), None);
        set.publish(vec![]);
        assert_eq!(set.pick(), Err(NoPeer::Empty));
    }
}
