//! Which Gateway came first. Tunnel arbitration (between claims of equal standing) and the
//! per-namespace data-plane cap decide by the same order: oldest `creationTimestamp` first,
//! equal timestamps broken by UID, so the two rules can never rank one pair of Gateways
//! differently.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

/// A position in the oldest-first order. `Ord`: an older Gateway is `Less`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seniority {
    /// `None` only for objects that never came from the API server; they rank last.
    pub created: Option<Timestamp>,
    pub uid: String,
}

impl Seniority {
    pub fn new(created: Option<Timestamp>, uid: impl Into<String>) -> Self {
        Self {
            created,
            uid: uid.into(),
        }
    }

    pub fn of(meta: &ObjectMeta) -> Self {
        Self::new(
            meta.creation_timestamp.as_ref().map(|t| t.0),
            meta.uid.clone().unwrap_or_default(),
        )
    }
}

impl Ord for Seniority {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_age = match (&self.created, &other.created) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_age.then_with(|| self.uid.cmp(&other.uid))
    }
}

impl PartialOrd for Seniority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, uid: &str) -> Seniority {
        Seniority::new(Some(Timestamp::from_second(secs).unwrap()), uid)
    }

    #[test]
    fn the_older_gateway_ranks_first_and_equal_timestamps_break_by_uid() {
        assert!(at(100, "zzz") < at(200, "aaa"));
        assert!(at(100, "aaa") < at(100, "bbb"));
        assert!(at(100, "aaa") < Seniority::new(None, "000"));
    }
}
