//! What the translation of one route found: the rules that go into the document and the
//! route's verdicts about its contents (`ResolvedRefs`, `Accepted`, `PartiallyInvalid`).
//!
//! The proxy refuses a whole document when one part of it is invalid, so every translated rule
//! is checked by the proxy's own compiler ([`tunnel_config::compile::validate`]) alone in a
//! one-route document before it is kept; a rule that fails is dropped and the proxy's error,
//! which names the field, goes into the route's status.

use std::collections::BTreeSet;

use tunnel_config::compile;
use tunnel_config::config::{self, Config, GrpcRule, HttpRule, Route};

use crate::conditions::Verdict;

/// One route translated: its rules for the document and its verdicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated<R> {
    /// What goes into the document, in rule order: invalid rules are already dropped, rules
    /// with unsupported parts already fail closed.
    pub rules: Vec<R>,
    /// The route parent `ResolvedRefs`: `True`/`ResolvedRefs`, or `False` with
    /// `RefNotPermitted`, `BackendNotFound`, `InvalidKind`, `UnsupportedProtocol` or
    /// `UnsupportedValue` (the first problem's reason); the message names every bad reference.
    pub resolved_refs: Verdict,
    /// `Some(False/UnsupportedValue)` when the route cannot be served at all (every rule was
    /// dropped); `None` when nothing argues against accepting it.
    pub accepted: Option<Verdict>,
    /// `PartiallyInvalid=True`/`UnsupportedValue` when some rules were dropped or fail closed;
    /// the message starts with `Dropped Rule`, as the specification requires.
    pub partially_invalid: Option<Verdict>,
    /// `(namespace, name)` of every Service referenced (backends and mirrors), sorted: the
    /// routes a Service, EndpointSlice or BackendTLSPolicy change affects.
    pub services: Vec<(String, String)>,
}

/// A reference that cannot be served as written, for `ResolvedRefs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RefProblem {
    pub reason: &'static str,
    pub message: String,
}

/// Collects what the translation of one route finds.
#[derive(Debug, Default)]
pub(super) struct Report {
    refs: Vec<RefProblem>,
    /// `Dropped Rule N...` entries, for `PartiallyInvalid` (and `Accepted` when none is left).
    rules: Vec<String>,
    dropped: usize,
    services: BTreeSet<(String, String)>,
}

impl Report {
    pub fn ref_problem(&mut self, reason: &'static str, message: impl Into<String>) {
        self.refs.push(RefProblem {
            reason,
            message: message.into(),
        });
    }

    pub fn service(&mut self, namespace: &str, name: &str) {
        self.services
            .insert((namespace.to_owned(), name.to_owned()));
    }

    /// Rule `index` stays in the document but answers 500 instead of what it asks for.
    pub fn rule_fails_closed(&mut self, index: usize, why: impl std::fmt::Display) {
        self.rules.push(format!(
            "Dropped Rule {index} (it answers 500 instead): {why}"
        ));
    }

    /// Keeps `rule` (spec index `index`) when the proxy accepts it, drops it otherwise.
    pub fn keep<R: DocumentRule>(&mut self, route: &str, index: usize, rule: R, out: &mut Vec<R>) {
        match rule.check(route) {
            Ok(()) => out.push(rule),
            Err(why) => {
                self.dropped += 1;
                self.rules.push(format!("Dropped Rule {index}: {why}"));
            }
        }
    }

    pub fn finish<R>(self, rules: Vec<R>) -> Translated<R> {
        let resolved_refs = match self.refs.first() {
            None => Verdict::ok("ResolvedRefs", "All references resolved"),
            Some(first) => Verdict::fail(
                "ResolvedRefs",
                first.reason,
                self.refs
                    .iter()
                    .map(|p| p.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        };
        let summary = self.rules.join("; ");
        let (accepted, partially_invalid) = if self.rules.is_empty() {
            (None, None)
        } else if rules.is_empty() && self.dropped > 0 {
            (
                Some(Verdict::fail(
                    "Accepted",
                    "UnsupportedValue",
                    format!("No rule can be served. {summary}"),
                )),
                None,
            )
        } else {
            (
                None,
                Some(Verdict::new(
                    "PartiallyInvalid",
                    true,
                    "UnsupportedValue",
                    summary,
                )),
            )
        };
        Translated {
            rules,
            resolved_refs,
            accepted,
            partially_invalid,
            services: self.services.into_iter().collect(),
        }
    }
}

/// A rule of the document that can be checked on its own.
pub(super) trait DocumentRule: Clone {
    fn alone(self, route: &str) -> Route;

    /// The proxy's verdict on this rule alone in a document, the error's path made relative to
    /// the rule (`matches[0].path.value: regex parse error ...`).
    fn check(&self, route: &str) -> Result<(), String> {
        let doc = Config {
            version: 1,
            listeners: Vec::new(),
            routes: vec![self.clone().alone(route)],
        };
        compile::validate(&doc).map_err(|e| {
            let field = e
                .path
                .strip_prefix("routes[0].rules[0]")
                .map(|p| p.trim_start_matches('.'))
                .filter(|p| !p.is_empty())
                .unwrap_or("rule");
            format!("{field}: {}", e.message)
        })
    }
}

impl DocumentRule for HttpRule {
    fn alone(self, route: &str) -> Route {
        Route::Http(config::HttpRoute {
            name: route.to_owned(),
            hostnames: Vec::new(),
            excluded_hostnames: Default::default(),
            rules: vec![self],
        })
    }
}

impl DocumentRule for GrpcRule {
    fn alone(self, route: &str) -> Route {
        Route::Grpc(config::GrpcRoute {
            name: route.to_owned(),
            hostnames: Vec::new(),
            excluded_hostnames: Default::default(),
            rules: vec![self],
        })
    }
}
