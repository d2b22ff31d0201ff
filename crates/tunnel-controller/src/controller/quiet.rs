//! When a round publishes what waits for a burst of changes to end: tunnels' ingress documents,
//! DNS records and Access applications (so a burst costs one Cloudflare write per tunnel), and,
//! in a large burst, route statuses and Gateways' route counts ([`crate::status::hold_in_burst`]:
//! one status write per object instead of one per round of the burst).
//!
//! A decision from three instants, without I/O, so its table test needs no clock. The [`Burst`]
//! it keeps also counts what the burst's rounds wrote, and ends with it.

use std::time::{Duration, Instant};

use super::{INGRESS_QUIET, MAX_INGRESS_DEFER};

/// What a round publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// Quiet for [`INGRESS_QUIET`], or a burst [`MAX_INGRESS_DEFER`] long: everything.
    Due,
    /// Mid-burst: what waits for the quiet waits, and the next round comes at `until` (when it
    /// is due) unless a change wakes it first. Not a failure: the round's backoff is untouched.
    Wait { until: Instant },
}

/// The burst of changes going on, if any.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    /// When it began (`None`: no burst).
    pub since: Option<Instant>,
    /// The route statuses and route counts its rounds wrote without waiting for its end (what
    /// [`crate::status::hold_in_burst`] lets through, in all).
    pub written: usize,
}

/// The round at `now`, `quiet_for` after the last change to a watched object (`None`: no
/// change seen yet). `burst` is the current burst; a due round ends it.
pub fn decide(burst: &mut Burst, quiet_for: Option<Duration>, now: Instant) -> Publication {
    let quiet_for = match quiet_for {
        Some(q) if q < INGRESS_QUIET => q,
        _ => {
            *burst = Burst::default();
            return Publication::Due;
        }
    };
    let first = *burst.since.get_or_insert(now);
    let deadline = first + MAX_INGRESS_DEFER;
    if now >= deadline {
        *burst = Burst::default();
        return Publication::Due;
    }
    Publication::Wait {
        until: (now + (INGRESS_QUIET - quiet_for)).min(deadline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rounds_publish_once_the_changes_pause_or_the_burst_is_long() {
        let now = Instant::now();
        let ago = |d: Duration| now.checked_sub(d).expect("the clock is past ten seconds");
        let wait = |after: Duration| Publication::Wait { until: now + after };
        // (the burst began this long ago, quiet for, the decision, the burst began after it)
        let cases = [
            // Nothing changed since the start: due.
            (None, None, Publication::Due, None),
            // Quiet long enough: due, and the burst is over.
            (Some(ms(3_000)), Some(INGRESS_QUIET), Publication::Due, None),
            (None, Some(ms(5_000)), Publication::Due, None),
            // A change 200 ms ago starts a burst: the next round in 800 ms.
            (None, Some(ms(200)), wait(ms(800)), Some(ms(0))),
            // A burst going on: the next round when the quiet would be long enough...
            (
                Some(ms(4_000)),
                Some(ms(100)),
                wait(ms(900)),
                Some(ms(4_000)),
            ),
            // ... but no later than MAX_INGRESS_DEFER into it.
            (
                Some(ms(9_500)),
                Some(ms(100)),
                wait(ms(500)),
                Some(ms(9_500)),
            ),
            // A burst that long: due even with changes still coming.
            (
                Some(MAX_INGRESS_DEFER),
                Some(ms(10)),
                Publication::Due,
                None,
            ),
        ];
        for (began, quiet, expected, after) in cases {
            let written = if began.is_some() { 7 } else { 0 };
            let mut burst = Burst {
                since: began.map(ago),
                written,
            };
            assert_eq!(
                decide(&mut burst, quiet, now),
                expected,
                "burst began {began:?} ago, quiet for {quiet:?}"
            );
            assert_eq!(
                burst.since,
                after.map(ago),
                "the burst's start after {began:?}, {quiet:?}"
            );
            // What the burst's rounds wrote is counted until it ends.
            let written = if after.is_some() { written } else { 0 };
            assert_eq!(burst.written, written, "after {began:?}, {quiet:?}");
        }
    }
}
