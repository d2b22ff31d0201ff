//! Bounded retry for Cloudflare API calls.
//!
//! - 429: wait `Retry-After` (seconds, per
//!   <https://developers.cloudflare.com/fundamentals/api/reference/limits/>), capped at
//!   [`RetryPolicy::max_delay`]; without the header, the backoff below.
//! - 5xx and network errors: exponential backoff `base_delay * 2^(attempt-1)`, capped.
//! - Auth, not found, invalid and decode errors: returned at once.
//!
//! The sleep is a parameter so tests pass a recorder and production passes
//! `tokio::time::sleep`. There is no jitter: one leader calls the API, so there is no herd.

use std::future::Future;
use std::time::Duration;

use crate::error::Error;

/// How many times and how long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first (at least 1).
    pub max_attempts: u32,
    /// First backoff delay.
    pub base_delay: Duration,
    /// Upper bound of any single wait, `Retry-After` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` after `err` on attempt `attempt` (1-based), or
    /// `None` when the error must not be retried.
    pub fn delay_after(&self, attempt: u32, err: &Error) -> Option<Duration> {
        if !err.is_retryable() {
            return None;
        }
        let backoff = || {
            let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
            self.base_delay.saturating_mul(factor)
        };
        let wait = match err {
            Error::RateLimited {
                retry_after: Some(after),
                ..
            } => *after,
            _ => backoff(),
        };
        Some(wait.min(self.max_delay))
    }
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or the attempts run out;
/// `sleep` performs each wait. Returns the last error.
pub async fn retry<T, Op, Fut, Sleep, SleepFut>(
    policy: &RetryPolicy,
    mut sleep: Sleep,
    mut op: Op,
) -> Result<T, Error>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
    Sleep: FnMut(Duration) -> SleepFut,
    SleepFut: Future<Output = ()>,
{
    let max = policy.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(err) => {
                let delay = match policy.delay_after(attempt, &err) {
                    Some(d) if attempt < max => d,
                    _ => return Err(err),
                };
                tracing::debug!(attempt, ?delay, error = %err, "retrying Cloudflare API call");
                sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
        }
    }

    async fn run(outcomes: Vec<Result<u32, Error>>) -> (Result<u32, Error>, Vec<Duration>, usize) {
        let queue = RefCell::new(VecDeque::from(outcomes));
        let calls = RefCell::new(0usize);
        let slept = RefCell::new(Vec::new());
        let result = retry(
            &policy(),
            |d| {
                slept.borrow_mut().push(d);
                std::future::ready(())
            },
            || {
                *calls.borrow_mut() += 1;
                let next = queue.borrow_mut().pop_front().expect("op called too often");
                std::future::ready(next)
            },
        )
        .await;
        (result, slept.into_inner(), calls.into_inner())
    }

    fn server() -> Error {
        Error::from_status(503, None, vec![])
    }

    fn limited(secs: Option<u64>) -> Error {
        Error::from_status(429, secs.map(Duration::from_secs), vec![])
    }

    #[tokio::test]
    async fn exponential_backoff_for_server_errors() {
        let (r, slept, calls) = run(vec![Err(server()), Err(server()), Ok(5)]).await;
        assert_eq!(r.unwrap(), 5);
        assert_eq!(calls, 3);
        assert_eq!(
            slept,
            vec![Duration::from_millis(100), Duration::from_millis(200)]
        );
    }

    #[tokio::test]
    async fn honours_retry_after_and_caps_it() {
        let (r, slept, _) = run(vec![Err(limited(Some(2))), Err(limited(Some(600))), Ok(1)]).await;
        assert_eq!(r.unwrap(), 1);
        assert_eq!(slept, vec![Duration::from_secs(2), Duration::from_secs(5)]);
        let (_, slept, _) = run(vec![Err(limited(None)), Ok(1)]).await;
        assert_eq!(slept, vec![Duration::from_millis(100)]);
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts() {
        let (r, slept, calls) = run(vec![
            Err(server()),
            Err(server()),
            Err(server()),
            Err(limited(Some(1))),
        ])
        .await;
        assert_eq!(r.unwrap_err().kind(), crate::ErrorKind::RateLimited);
        assert_eq!(calls, 4);
        assert_eq!(slept.len(), 3);
        assert_eq!(slept[2], Duration::from_millis(400));
    }

    #[tokio::test]
    async fn no_retry_for_auth_or_invalid() {
        for err in [
            Error::from_status(403, None, vec![]),
            Error::from_status(400, None, vec![]),
            Error::from_status(404, None, vec![]),
        ] {
            let (r, slept, calls) = run(vec![Err(err)]).await;
            assert!(r.is_err());
            assert_eq!(calls, 1);
            assert!(slept.is_empty());
        }
    }
}
