//! What lets a Cloudflare writer skip its calls: the input it last synced a key to, when, and
//! what came of it. An unchanged input is not looked at again until [`RESYNC_AFTER`] has passed
//! (then it is read, and healed if someone edited it): a steady cluster costs no API calls per
//! round. The tunnels' documents, the DNS records and the Access applications each keep one per
//! key.

use std::time::{Duration, Instant};

/// A key already in sync is read again after this long (drift healing).
pub const RESYNC_AFTER: Duration = Duration::from_secs(300);

/// One key's last sync.
#[derive(Debug, Clone)]
pub(crate) struct Synced<I, R> {
    pub input: I,
    pub result: R,
    at: Instant,
}

impl<I: PartialEq, R> Synced<I, R> {
    /// A sync of `input`, now.
    pub fn new(input: I, result: R) -> Self {
        Synced {
            input,
            result,
            at: Instant::now(),
        }
    }

    /// `result` still stands for `input`: the same input, synced less than [`RESYNC_AFTER`] ago.
    pub fn stands_for(&self, input: &I) -> bool {
        self.input == *input && self.at.elapsed() < RESYNC_AFTER
    }
}
