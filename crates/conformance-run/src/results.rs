//! The suite's per-test outcomes, read from its `go test -v` output, and their comparison with the
//! expected-results file (the tests that must pass), so that a regression fails the run. Pure.

use std::collections::{BTreeMap, BTreeSet};

/// What happened to one conformance test (a direct subtest of `TestConformance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    Skip,
}

/// Every conformance test's outcome by name, from the lines `--- PASS: TestConformance/<name>`
/// (and FAIL, SKIP). Nested subtests (`TestConformance/<name>/<case>`) are not tests of their own.
pub fn parse(output: &str) -> BTreeMap<String, Outcome> {
    let mut out = BTreeMap::new();
    for line in output.lines() {
        let line = line.trim_start();
        let Some((outcome, rest)) = [
            ("--- PASS: ", Outcome::Pass),
            ("--- FAIL: ", Outcome::Fail),
            ("--- SKIP: ", Outcome::Skip),
        ]
        .iter()
        .find_map(|(prefix, o)| line.strip_prefix(prefix).map(|r| (*o, r))) else {
            continue;
        };
        let Some(path) = rest
            .split_whitespace()
            .next()
            .and_then(|p| p.strip_prefix("TestConformance/"))
        else {
            continue;
        };
        if !path.is_empty() && !path.contains('/') {
            out.insert(path.to_owned(), outcome);
        }
    }
    out
}

/// The expected-results file: one test name per line; `#` starts a comment.
pub fn parse_expected(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The file listing `passed` (sorted), with a header saying what it is.
pub fn render_expected(passed: &BTreeSet<String>) -> String {
    let mut text = String::from(
        "# Gateway API conformance tests that must pass (`make conformance` fails when one does\n\
         # not). Rewritten by `make conformance-update`; see docs/conformance/README.md.\n",
    );
    for name in passed {
        text.push_str(name);
        text.push('\n');
    }
    text
}

/// The run compared with the expected passes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Expected to pass, and failed, skipped or not run: each fails the run.
    pub regressions: Vec<(String, Option<Outcome>)>,
    /// Passed without being expected to: the file should list them.
    pub new_passes: Vec<String>,
    pub passed: BTreeSet<String>,
    pub failed: BTreeSet<String>,
    pub skipped: BTreeSet<String>,
}

pub fn compare(expected: &BTreeSet<String>, outcomes: &BTreeMap<String, Outcome>) -> Verdict {
    let with = |o: Outcome| -> BTreeSet<String> {
        outcomes
            .iter()
            .filter(|(_, x)| **x == o)
            .map(|(n, _)| n.clone())
            .collect()
    };
    let passed = with(Outcome::Pass);
    Verdict {
        regressions: expected
            .iter()
            .filter(|n| !passed.contains(*n))
            .map(|n| (n.clone(), outcomes.get(n).copied()))
            .collect(),
        new_passes: passed.difference(expected).cloned().collect(),
        failed: with(Outcome::Fail),
        skipped: with(Outcome::Skip),
        passed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "\
=== RUN   TestConformance
    --- PASS: TestConformance/HTTPRouteSimpleSameNamespace (0.52s)
        --- PASS: TestConformance/HTTPRouteMatching/0_request_to_'/' (0.01s)
    --- PASS: TestConformance/HTTPRouteMatching (1.50s)
    --- FAIL: TestConformance/HTTPRouteRedirectPort (30.00s)
    --- SKIP: TestConformance/HTTPRouteHTTPSListener (0.00s)
--- FAIL: TestConformance (120.00s)
--- PASS: TestOther/HTTPRouteX (0.00s)
    conformance.go:1: --- PASS: TestConformance/NotAResultLine
";

    #[test]
    fn only_direct_subtests_of_test_conformance_are_tests() {
        let got = parse(OUTPUT);
        let want: BTreeMap<String, Outcome> = [
            ("HTTPRouteSimpleSameNamespace", Outcome::Pass),
            ("HTTPRouteMatching", Outcome::Pass),
            ("HTTPRouteRedirectPort", Outcome::Fail),
            ("HTTPRouteHTTPSListener", Outcome::Skip),
        ]
        .into_iter()
        .map(|(n, o)| (n.to_owned(), o))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn an_expected_pass_that_fails_skips_or_is_missing_is_a_regression() {
        let outcomes = parse(OUTPUT);
        // (expected, regressions, new passes)
        type Case<'a> = (
            &'a [&'a str],
            &'a [(&'a str, Option<Outcome>)],
            &'a [&'a str],
        );
        let cases: &[Case<'_>] = &[
            (
                &["HTTPRouteSimpleSameNamespace", "HTTPRouteMatching"],
                &[],
                &[],
            ),
            (
                &["HTTPRouteSimpleSameNamespace"],
                &[],
                &["HTTPRouteMatching"],
            ),
            (
                &[
                    "HTTPRouteSimpleSameNamespace",
                    "HTTPRouteMatching",
                    "HTTPRouteRedirectPort",
                    "HTTPRouteHTTPSListener",
                    "GRPCExactMethodMatching",
                ],
                &[
                    ("GRPCExactMethodMatching", None),
                    ("HTTPRouteHTTPSListener", Some(Outcome::Skip)),
                    ("HTTPRouteRedirectPort", Some(Outcome::Fail)),
                ],
                &[],
            ),
        ];
        for (expected, regressions, new_passes) in cases {
            let expected = expected.iter().map(|s| s.to_string()).collect();
            let v = compare(&expected, &outcomes);
            let want: Vec<(String, Option<Outcome>)> = regressions
                .iter()
                .map(|(n, o)| (n.to_string(), *o))
                .collect();
            assert_eq!(v.regressions, want, "{expected:?}");
            assert_eq!(v.new_passes, *new_passes, "{expected:?}");
        }
    }

    #[test]
    fn the_expected_file_round_trips_and_ignores_comments() {
        let passed: BTreeSet<String> = ["B", "A"].iter().map(|s| s.to_string()).collect();
        let text = render_expected(&passed);
        assert!(text.starts_with('#'));
        assert_eq!(parse_expected(&text), passed);
        assert_eq!(
            parse_expected("A  # why\n\n  # only a comment\nB\n"),
            passed
        );
    }
}
