//! Status conditions as the controller decides them ([`Verdict`]) and their merge into the
//! `metav1.Condition` lists written to the API server: `lastTransitionTime` moves only when the
//! status flips, and `observedGeneration` is the generation the verdict was computed from, so a
//! status that says the same thing as before compares equal and is not written again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// One condition the controller wants on an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The condition type (`Accepted`, `ResolvedRefs`, `cf.k8s.lex.la/ProxyConfigPushed`, ...).
    pub type_: String,
    pub status: bool,
    /// A CamelCase reason from the Gateway API specification or this project's docs.
    pub reason: String,
    /// What a user can act on.
    pub message: String,
}

impl Verdict {
    pub fn new(
        type_: impl Into<String>,
        status: bool,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `type_=True` with the reason equal to the type (the Gateway API convention for success).
    pub fn ok(type_: &str, message: impl Into<String>) -> Self {
        let reason = type_.rsplit('/').next().unwrap_or(type_).to_owned();
        Self::new(type_, true, reason, message)
    }

    pub fn fail(type_: &str, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(type_, false, reason, message)
    }
}

/// The condition list to write: `desired` in its order, each keeping the existing entry's
/// `lastTransitionTime` when its status did not change. Conditions of types not in `desired`
/// are dropped (the controller owns the whole list it writes).
pub fn merge(
    existing: &[Condition],
    desired: &[Verdict],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|v| {
            let status = if v.status { "True" } else { "False" };
            let since = existing
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: v.type_.clone(),
                status: status.to_owned(),
                reason: v.reason.clone(),
                message: truncate_message(&v.message),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect()
}

/// The API server refuses condition messages over 32,768 bytes.
fn truncate_message(m: &str) -> String {
    const MAX: usize = 32 * 1024 - 16;
    if m.len() <= MAX {
        return m.to_owned();
    }
    let mut end = MAX;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &m[..end])
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_time_and_a_flip_moves_it() {
        let first = merge(&[], &[Verdict::ok("Accepted", "fine")], Some(1), &at(100));
        assert_eq!(first[0].reason, "Accepted");
        assert_eq!(first[0].status, "True");
        let same = merge(
            &first,
            &[Verdict::ok("Accepted", "fine")],
            Some(1),
            &at(200),
        );
        assert_eq!(same, first, "nothing changed, so nothing to write");
        let flipped = merge(
            &same,
            &[Verdict::fail("Accepted", "Pending", "sync failed")],
            Some(2),
            &at(300),
        );
        assert_eq!(flipped[0].last_transition_time, at(300));
        assert_eq!(flipped[0].observed_generation, Some(2));
    }

    #[test]
    fn the_reason_of_a_domain_prefixed_success_is_its_short_name() {
        assert_eq!(
            Verdict::ok("cf.k8s.lex.la/ProxyConfigPushed", "").reason,
            "ProxyConfigPushed"
        );
    }

    #[test]
    fn overlong_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(40_000);
        let c = merge(&[], &[Verdict::fail("Accepted", "X", long)], None, &at(1));
        assert!(c[0].message.len() < 32 * 1024);
        assert!(c[0].message.ends_with("..."));
    }
}
