//! The suite's per-test outcomes, read from its `go test -v` output, and their comparison with the
//! expected-results file (the tests that must pass), so that a regression fails the run; and the
//! suite's own known races, which decide whether a failed test is run again alone. Pure.

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

/// The lines of a list file that say something, with their numbers: `#` starts a comment.
fn entries(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(n, l)| (n + 1, l))
}

/// The expected-results file: one test name per line; `#` starts a comment.
pub fn parse_expected(text: &str) -> BTreeSet<String> {
    entries(text).map(|(_, l)| l.to_owned()).collect()
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

/// A race in the suite itself (not in the implementation): `test` may fail while the
/// implementation did its part, and when it does its output has a line containing `signature`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteRace {
    pub test: String,
    pub signature: String,
}

/// The known-races file: per line a test's name, then the signature (the rest of the line up to
/// `#`, trimmed); `#` starts the reason. A line without a signature is an error, so that a race
/// cannot excuse every failure of its test.
pub fn parse_races(text: &str) -> Result<Vec<SuiteRace>, String> {
    entries(text)
        .map(|(n, line)| {
            let (test, signature) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let signature = signature.trim();
            if signature.is_empty() {
                return Err(format!("line {n}: {test} has no signature"));
            }
            Ok(SuiteRace {
                test: test.to_owned(),
                signature: signature.to_owned(),
            })
        })
        .collect()
}

/// What the suite printed for `test` and its cases: from its `=== RUN` line up to the next
/// top-level test's (the suite runs its tests one after another; only their cases run in
/// parallel).
fn section<'a>(output: &'a str, test: &str) -> impl Iterator<Item = &'a str> {
    let is_run_of_a_test = |line: &str| {
        line.trim_start()
            .strip_prefix("=== RUN   TestConformance/")
            .is_some_and(|name| !name.contains('/'))
    };
    let start = format!("=== RUN   TestConformance/{test}");
    output
        .lines()
        .skip_while(move |l| l.trim_end() != start)
        .enumerate()
        .take_while(move |(i, l)| *i == 0 || !is_run_of_a_test(l))
        .map(|(_, l)| l)
}

/// The regressions a known race may explain: expected passes that failed with the race's
/// signature in their own output. Each may be run again alone, once.
pub fn raced<'a>(verdict: &Verdict, races: &'a [SuiteRace], output: &str) -> Vec<&'a SuiteRace> {
    races
        .iter()
        .filter(|race| {
            verdict
                .regressions
                .iter()
                .any(|(name, o)| *name == race.test && *o == Some(Outcome::Fail))
                && section(output, &race.test).any(|l| l.contains(&race.signature))
        })
        .collect()
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

    const RACED: &str = "\
=== RUN   TestConformance/HTTPRouteRequestMirror
=== RUN   TestConformance/HTTPRouteRequestMirror/0_request_to_'/mirror'
=== NAME  TestConformance/HTTPRouteRequestMirror/0_request_to_'/mirror'
    mirror.go:47: Messages: Couldn't find mirrored request in \"ns/infra-backend-v2\" logs
    --- FAIL: TestConformance/HTTPRouteRequestMirror (31.00s)
=== RUN   TestConformance/HTTPRouteRequestMultipleMirrors
    http.go:285: timeout while waiting after 30 attempts
    --- FAIL: TestConformance/HTTPRouteRequestMultipleMirrors (30.00s)
=== RUN   TestConformance/HTTPRouteRedirectPort
    mirror.go:47: Messages: Couldn't find mirrored request in \"ns/infra-backend-v3\" logs
    --- FAIL: TestConformance/HTTPRouteRedirectPort (30.00s)
=== RUN   TestConformance/HTTPRouteSimpleSameNamespace
    --- PASS: TestConformance/HTTPRouteSimpleSameNamespace (0.52s)
";

    #[test]
    fn only_a_failure_showing_its_races_signature_in_its_own_output_is_raced() {
        let races = parse_races(
            "# why\n\
             HTTPRouteRequestMirror  Couldn't find mirrored request  # gateway-api#4940\n\
             HTTPRouteRequestMultipleMirrors Couldn't find mirrored request\n\
             HTTPRouteSimpleSameNamespace Couldn't find\n",
        )
        .unwrap();
        assert_eq!(races.len(), 3);
        assert_eq!(races[0].signature, "Couldn't find mirrored request");
        let expected = [
            "HTTPRouteRequestMirror",
            "HTTPRouteRequestMultipleMirrors",
            "HTTPRouteRedirectPort",
            "HTTPRouteSimpleSameNamespace",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let verdict = compare(&expected, &parse(RACED));
        let raced: Vec<&str> = raced(&verdict, &races, RACED)
            .iter()
            .map(|r| r.test.as_str())
            .collect();
        // MultipleMirrors failed otherwise (its primary request timed out); RedirectPort shows
        // the signature but names no race; SimpleSameNamespace passed.
        assert_eq!(raced, ["HTTPRouteRequestMirror"]);
    }

    #[test]
    fn a_race_without_a_signature_is_refused() {
        assert_eq!(
            parse_races("A sig\nHTTPRouteRequestMirror   # reason only\n"),
            Err("line 2: HTTPRouteRequestMirror has no signature".to_owned())
        );
    }
}
