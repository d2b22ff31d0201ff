//! A config push of only what changed (`PATCH /config`): the routes that differ between two
//! versions of a document, as one splice of the route list, applied by the proxy only on top of
//! the exact version it was computed from.
//!
//! A single route change with thousands of routes present is one route in the delta instead of
//! the whole document (TG-15's propagation target). The splice keeps the route order, which is
//! the cross-route precedence order: a route changed in place stays where it was, a new route
//! goes where the controller put it. The result of [`Delta::apply`] is exactly the document the
//! controller would have pushed in full; the proxy, which keeps its routes compiled, splices
//! them by [`Delta::replaced`] and checks and compiles only the routes the delta brings.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::config::{Config, Listener, Route};

/// The change from the document of version `base_version` to the one of `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Delta {
    /// The version the proxy must hold exactly; anything else is refused (409).
    pub base_version: u64,
    pub version: u64,
    /// The new document's listeners, when they differ from the base's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listeners: Option<Vec<Listener>>,
    /// Index of the first route replaced.
    pub start: usize,
    /// How many routes from `start` on are replaced.
    pub remove: usize,
    /// What replaces them, in order.
    #[serde(default)]
    pub routes: Vec<Route>,
}

/// Why a delta cannot be applied to the held document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    #[error("the delta applies to version {base}, the loaded version is {loaded}")]
    Base { base: u64, loaded: u64 },
    #[error("the delta's version {version} is not newer than its base {base}")]
    NotNewer { base: u64, version: u64 },
    #[error("the delta replaces routes {start}..{start}+{remove}, the document has {len}")]
    OutOfRange {
        start: usize,
        remove: usize,
        len: usize,
    },
}

impl Delta {
    /// The delta from `base` to `new` (versions taken from both): the routes between their
    /// longest common prefix and longest common suffix.
    pub fn between(base: &Config, new: &Config) -> Delta {
        let (old, next) = (&base.routes, &new.routes);
        let prefix = old.iter().zip(next).take_while(|(a, b)| a == b).count();
        let room = old.len().min(next.len()) - prefix;
        let suffix = old
            .iter()
            .rev()
            .zip(next.iter().rev())
            .take(room)
            .take_while(|(a, b)| a == b)
            .count();
        Delta {
            base_version: base.version,
            version: new.version,
            listeners: (base.listeners != new.listeners).then(|| new.listeners.clone()),
            start: prefix,
            remove: old.len() - prefix - suffix,
            routes: next[prefix..next.len() - suffix].to_vec(),
        }
    }

    /// Whether applying it changes nothing but the version.
    pub fn is_empty(&self) -> bool {
        self.listeners.is_none() && self.remove == 0 && self.routes.is_empty()
    }

    /// The routes of the held document (version `loaded`, `len` routes) this delta replaces,
    /// when it applies to that document: its base is exactly `loaded`, its version is newer and
    /// the range lies inside the document. Whoever holds the document in another form than a
    /// [`Config`] (the proxy: each route beside what it compiled to) splices it with this.
    pub fn replaced(&self, loaded: u64, len: usize) -> Result<Range<usize>, DeltaError> {
        if loaded != self.base_version {
            return Err(DeltaError::Base {
                base: self.base_version,
                loaded,
            });
        }
        if self.version <= self.base_version {
            return Err(DeltaError::NotNewer {
                base: self.base_version,
                version: self.version,
            });
        }
        let end = self
            .start
            .checked_add(self.remove)
            .filter(|end| *end <= len)
            .ok_or(DeltaError::OutOfRange {
                start: self.start,
                remove: self.remove,
                len,
            })?;
        Ok(self.start..end)
    }

    /// The document `base` becomes, when `base` is the version this delta was computed from.
    pub fn apply(self, base: &Config) -> Result<Config, DeltaError> {
        let replaced = self.replaced(base.version, base.routes.len())?;
        let mut routes = Vec::with_capacity(base.routes.len() - replaced.len() + self.routes.len());
        routes.extend_from_slice(&base.routes[..replaced.start]);
        routes.extend(self.routes);
        routes.extend_from_slice(&base.routes[replaced.end..]);
        Ok(Config {
            version: self.version,
            listeners: self.listeners.unwrap_or_else(|| base.listeners.clone()),
            routes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HttpRoute;

    fn route(name: &str, host: &str) -> Route {
        Route::Http(HttpRoute {
            name: name.to_owned(),
            hostnames: vec![host.to_owned()],
            excluded_hostnames: Default::default(),
            rules: Vec::new(),
        })
    }

    fn doc(version: u64, routes: &[(&str, &str)]) -> Config {
        Config {
            version,
            listeners: Vec::new(),
            routes: routes.iter().map(|(n, h)| route(n, h)).collect(),
        }
    }

    #[test]
    fn between_then_apply_gives_the_new_document() {
        let a = ("ns/a", "a.example");
        let b = ("ns/b", "b.example");
        let c = ("ns/c", "c.example");
        let b2 = ("ns/b", "b2.example");
        let d = ("ns/d", "d.example");
        // (base routes, new routes, expected start, remove, replacing routes)
        type Routes<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Routes<'_>, Routes<'_>, usize, usize, usize)] = &[
            (&[a, b, c], &[a, b, c], 3, 0, 0),
            (&[a, b, c], &[a, b2, c], 1, 1, 1),
            (&[a, b, c], &[a, c], 1, 1, 0),
            (&[a, b, c], &[a, b, d, c], 2, 0, 1),
            (&[a, b, c], &[d, a, b, c], 0, 0, 1),
            (&[a, b, c], &[a, b, c, d], 3, 0, 1),
            (&[a, b, c], &[], 0, 3, 0),
            (&[], &[a, b], 0, 0, 2),
            (&[a, b, c], &[c, b, a], 0, 3, 3),
            // Repeated routes: the prefix and suffix never overlap.
            (&[a, a], &[a, a, a], 2, 0, 1),
            (&[a, a, a], &[a], 1, 2, 0),
        ];
        for (i, (old, new, start, remove, replacing)) in cases.iter().enumerate() {
            let (base, next) = (doc(7, old), doc(8, new));
            let delta = Delta::between(&base, &next);
            assert_eq!(
                (delta.start, delta.remove, delta.routes.len()),
                (*start, *remove, *replacing),
                "case {i}"
            );
            assert_eq!(delta.is_empty(), old == new, "case {i}");
            assert_eq!(delta.apply(&base), Ok(next), "case {i}");
        }
    }

    #[test]
    fn listeners_travel_only_when_they_changed() {
        let mut base = doc(1, &[("ns/a", "a.example")]);
        base.listeners = vec![Listener {
            name: "ns/gw/http".to_owned(),
            hostname: Some("a.example".to_owned()),
        }];
        let mut next = base.clone();
        next.version = 2;
        assert_eq!(Delta::between(&base, &next).listeners, None);
        next.listeners[0].hostname = None;
        let delta = Delta::between(&base, &next);
        assert_eq!(delta.listeners, Some(next.listeners.clone()));
        assert_eq!(delta.apply(&base), Ok(next));
    }

    #[test]
    fn apply_refuses_a_wrong_base_an_old_version_and_a_bad_range() {
        let base = doc(5, &[("ns/a", "a.example"), ("ns/b", "b.example")]);
        let good = Delta::between(&base, &doc(6, &[("ns/a", "a.example")]));
        let with = |f: &dyn Fn(&mut Delta)| {
            let mut d = good.clone();
            f(&mut d);
            d.apply(&base)
        };
        assert_eq!(
            with(&|d| d.base_version = 4),
            Err(DeltaError::Base { base: 4, loaded: 5 })
        );
        assert_eq!(
            with(&|d| d.version = 5),
            Err(DeltaError::NotNewer {
                base: 5,
                version: 5
            })
        );
        for (start, remove) in [(3, 0), (1, 2), (usize::MAX, 1), (0, usize::MAX)] {
            assert_eq!(
                with(&|d| (d.start, d.remove) = (start, remove)),
                Err(DeltaError::OutOfRange {
                    start,
                    remove,
                    len: 2
                })
            );
        }
        assert!(good.apply(&base).is_ok());
    }
}
