//! The metric selectors of a PromQL expression: each metric name with its label matchers and
//! the labels the aggregations and vector matchings around it group or match by. Enough of
//! PromQL to know what a query needs from the exported series, not an evaluator: ranges and
//! subqueries (`[5m]`, `[$__rate_interval]`) are skipped whole, numbers, strings outside
//! matchers, operators and Grafana variables carry no series.
//!
//! Labels of `by`/`without` belong to the selectors inside the aggregation's argument; labels of
//! `on`/`ignoring`/`group_left`/`group_right` to every selector of the innermost parenthesised
//! group holding them (or of the whole expression).

use std::collections::BTreeSet;

/// How a matcher compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    Eq,
    Ne,
    Re,
    NotRe,
}

/// `label op "value"` inside braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    pub op: MatchOp,
    pub value: String,
}

/// One vector selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// The series name as Prometheus stores it (`foo_total`, `foo_bucket`).
    pub metric: String,
    /// The matchers in braces, `__name__` excluded.
    pub matchers: Vec<Matcher>,
    /// Labels the surrounding aggregations and vector matchings name.
    pub grouping: BTreeSet<String>,
}

impl Selector {
    /// Every label the query needs on this metric's series.
    pub fn labels(&self) -> BTreeSet<String> {
        self.matchers
            .iter()
            .map(|m| m.label.clone())
            .chain(self.grouping.iter().cloned())
            .collect()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("unterminated string or range starting at byte {0}")]
    Unterminated(usize),
    #[error("unbalanced `{0}` at byte {1}")]
    Unbalanced(char, usize),
    #[error("unexpected `{0}` at byte {1}")]
    Unexpected(char, usize),
    #[error("malformed label matchers at byte {0}")]
    BadMatchers(usize),
    #[error("a selector without a literal metric name at byte {0}")]
    NoMetricName(usize),
    #[error("`{0}` at byte {1} is not followed by a parenthesised label list")]
    BadLabelList(String, usize),
}

const AGGREGATORS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end",
];
const GROUPING: &[&str] = &["by", "without"];
const MATCHING: &[&str] = &["on", "ignoring", "group_left", "group_right"];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    /// A number, a duration, a Grafana variable: a value, no series.
    Value,
    Op(&'static str),
    Open(char),
    Close(char),
    Comma,
}

/// The metric selectors of `expr`, in the order they appear.
pub fn selectors(expr: &str) -> Result<Vec<Selector>, ParseError> {
    let toks = tokenize(expr)?;
    let pairs = match_parens(&toks)?;
    let mut found: Vec<(usize, Selector)> = Vec::new();
    let mut spans: Vec<Owed> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let (at, tok) = &toks[i];
        match tok {
            Tok::Ident(name) => {
                let lower = name.to_ascii_lowercase();
                let next_opens = matches!(toks.get(i + 1), Some((_, Tok::Open('('))));
                if GROUPING.contains(&lower.as_str()) || MATCHING.contains(&lower.as_str()) {
                    let (labels, after) = label_list(&toks, &pairs, i)?;
                    if MATCHING.contains(&lower.as_str()) {
                        spans.push(Owed {
                            span: enclosing(&pairs, i),
                            labels,
                        });
                    }
                    i = after;
                    continue;
                }
                if AGGREGATORS.contains(&lower.as_str())
                    && let Some(owed) = aggregation(&toks, &pairs, i)?
                {
                    spans.push(owed);
                    i += 1;
                    continue;
                }
                if next_opens || KEYWORDS.contains(&lower.as_str()) {
                    i += 1;
                    continue;
                }
                let (matchers, after) = if matches!(toks.get(i + 1), Some((_, Tok::Open('{')))) {
                    matchers(&toks, i + 1)?
                } else {
                    (Vec::new(), i + 1)
                };
                found.push((i, selector(name.clone(), matchers)));
                i = after;
            }
            Tok::Open('{') => {
                let (mut ms, after) = matchers(&toks, i)?;
                let name = ms
                    .iter()
                    .position(|m| m.label == "__name__" && m.op == MatchOp::Eq)
                    .ok_or(ParseError::NoMetricName(*at))?;
                let name = ms.remove(name).value;
                found.push((i, selector(name, ms)));
                i = after;
            }
            _ => i += 1,
        }
    }
    Ok(found
        .into_iter()
        .map(|(at, mut s)| {
            for owed in &spans {
                if owed.span.is_none_or(|(from, to)| from < at && at < to) {
                    s.grouping.extend(owed.labels.iter().cloned());
                }
            }
            s
        })
        .collect())
}

fn selector(metric: String, mut matchers: Vec<Matcher>) -> Selector {
    matchers.retain(|m| m.label != "__name__");
    Selector {
        metric,
        matchers,
        grouping: BTreeSet::new(),
    }
}

/// Labels owed by every selector strictly between two tokens.
struct Owed {
    /// The tokens around (`None`: the whole expression).
    span: Option<(usize, usize)>,
    labels: Vec<String>,
}

/// An aggregation at `i`: the span of its argument and its `by`/`without` labels (before or
/// after the argument). `None` when the name is not used as an aggregation (a metric named
/// `count`, say).
fn aggregation(
    toks: &[(usize, Tok)],
    pairs: &[Option<usize>],
    i: usize,
) -> Result<Option<Owed>, ParseError> {
    let is_grouping = |j: usize| matches!(toks.get(j), Some((_, Tok::Ident(k))) if GROUPING.contains(&k.to_ascii_lowercase().as_str()));
    let mut labels = Vec::new();
    let mut j = i + 1;
    if is_grouping(j) {
        let (l, after) = label_list(toks, pairs, j)?;
        labels = l;
        j = after;
    }
    let Some((_, Tok::Open('('))) = toks.get(j) else {
        return Ok(None);
    };
    let close = pairs[j].expect("parentheses are matched");
    if labels.is_empty() && is_grouping(close + 1) {
        labels = label_list(toks, pairs, close + 1)?.0;
    }
    Ok(Some(Owed {
        span: Some((j, close)),
        labels,
    }))
}

/// The labels in `keyword (a, b)` at `i`, and the index after the closing parenthesis.
fn label_list(
    toks: &[(usize, Tok)],
    pairs: &[Option<usize>],
    i: usize,
) -> Result<(Vec<String>, usize), ParseError> {
    let (at, Tok::Ident(keyword)) = &toks[i] else {
        unreachable!("called on an identifier")
    };
    let bad = || ParseError::BadLabelList(keyword.clone(), *at);
    let Some((_, Tok::Open('('))) = toks.get(i + 1) else {
        // `group_left` may stand alone.
        return if keyword.to_ascii_lowercase().starts_with("group_") {
            Ok((Vec::new(), i + 1))
        } else {
            Err(bad())
        };
    };
    let close = pairs[i + 1].expect("parentheses are matched");
    let mut labels = Vec::new();
    for (k, (_, t)) in toks[i + 2..close].iter().enumerate() {
        match (k % 2, t) {
            (0, Tok::Ident(l)) => labels.push(l.clone()),
            (1, Tok::Comma) => {}
            _ => return Err(bad()),
        }
    }
    Ok((labels, close + 1))
}

/// The matchers of the braces opening at `i`, and the index after the closing brace.
fn matchers(toks: &[(usize, Tok)], i: usize) -> Result<(Vec<Matcher>, usize), ParseError> {
    let at = toks[i].0;
    let bad = || ParseError::BadMatchers(at);
    let mut out = Vec::new();
    let mut j = i + 1;
    loop {
        match toks.get(j) {
            Some((_, Tok::Close('}'))) => return Ok((out, j + 1)),
            Some((_, Tok::Ident(label) | Tok::Str(label))) => {
                let op = match toks.get(j + 1) {
                    Some((_, Tok::Op("="))) => MatchOp::Eq,
                    Some((_, Tok::Op("!="))) => MatchOp::Ne,
                    Some((_, Tok::Op("=~"))) => MatchOp::Re,
                    Some((_, Tok::Op("!~"))) => MatchOp::NotRe,
                    _ => return Err(bad()),
                };
                let Some((_, Tok::Str(value))) = toks.get(j + 2) else {
                    return Err(bad());
                };
                out.push(Matcher {
                    label: label.clone(),
                    op,
                    value: value.clone(),
                });
                j += 3;
                match toks.get(j) {
                    Some((_, Tok::Comma)) => j += 1,
                    Some((_, Tok::Close('}'))) => {}
                    _ => return Err(bad()),
                }
            }
            _ => return Err(bad()),
        }
    }
}

/// For each opening parenthesis or brace, the index of its closing one.
fn match_parens(toks: &[(usize, Tok)]) -> Result<Vec<Option<usize>>, ParseError> {
    let mut pairs = vec![None; toks.len()];
    let mut stack: Vec<(usize, char)> = Vec::new();
    for (i, (at, t)) in toks.iter().enumerate() {
        match t {
            Tok::Open(c) => stack.push((i, *c)),
            Tok::Close(c) => {
                let want = if *c == ')' { '(' } else { '{' };
                match stack.pop() {
                    Some((o, open)) if open == want => pairs[o] = Some(i),
                    _ => return Err(ParseError::Unbalanced(*c, *at)),
                }
            }
            _ => {}
        }
    }
    match stack.pop() {
        Some((o, c)) => Err(ParseError::Unbalanced(c, toks[o].0)),
        None => Ok(pairs),
    }
}

/// The innermost parenthesised group around token `i`.
fn enclosing(pairs: &[Option<usize>], i: usize) -> Option<(usize, usize)> {
    (0..i)
        .rev()
        .find_map(|o| pairs[o].filter(|&c| c > i).map(|c| (o, c)))
}

fn tokenize(expr: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_' || c == b':';
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' | b'`' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(ParseError::Unterminated(start)),
                        Some(&q) if q == c => break,
                        Some(b'\\') if c != b'`' => {
                            let Some(&e) = b.get(i + 1) else {
                                return Err(ParseError::Unterminated(start));
                            };
                            value.push(e as char);
                            i += 2;
                        }
                        Some(_) => {
                            let ch = expr[i..].chars().next().expect("inside the string");
                            value.push(ch);
                            i += ch.len_utf8();
                        }
                    }
                }
                i += 1;
                out.push((start, Tok::Str(value)));
            }
            b'[' => {
                let Some(len) = b[i..].iter().position(|&x| x == b']') else {
                    return Err(ParseError::Unterminated(start));
                };
                i += len + 1;
            }
            b'$' => {
                i += 1;
                if b.get(i) == Some(&b'{') {
                    let Some(len) = b[i..].iter().position(|&x| x == b'}') else {
                        return Err(ParseError::Unterminated(start));
                    };
                    i += len + 1;
                } else {
                    while i < b.len() && ident_char(b[i]) {
                        i += 1;
                    }
                }
                out.push((start, Tok::Value));
            }
            b'(' | b'{' => {
                i += 1;
                out.push((start, Tok::Open(c as char)));
            }
            b')' | b'}' => {
                i += 1;
                out.push((start, Tok::Close(c as char)));
            }
            b',' => {
                i += 1;
                out.push((start, Tok::Comma));
            }
            _ if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_')
                {
                    // An exponent's sign: 1e-3.
                    i += 1;
                    if matches!(b[i - 1], b'e' | b'E')
                        && matches!(b.get(i), Some(b'+' | b'-'))
                        && b[start..i - 1]
                            .iter()
                            .all(|x| x.is_ascii_digit() || *x == b'.')
                    {
                        i += 1;
                    }
                }
                out.push((start, Tok::Value));
            }
            _ if ident_start(c) => {
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                out.push((start, Tok::Ident(expr[start..i].to_owned())));
            }
            _ => {
                const OPS: &[&str] = &[
                    "=~", "!~", "!=", "==", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "%",
                    "^", "@",
                ];
                let op = OPS
                    .iter()
                    .find(|op| expr[i..].starts_with(*op))
                    .ok_or_else(|| {
                        ParseError::Unexpected(expr[i..].chars().next().unwrap_or('?'), start)
                    })?;
                i += op.len();
                out.push((start, Tok::Op(op)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One selector as `metric{label op value,...} by(labels)` for compact expectations.
    fn show(s: &Selector) -> String {
        let ms: Vec<String> = s
            .matchers
            .iter()
            .map(|m| {
                let op = match m.op {
                    MatchOp::Eq => "=",
                    MatchOp::Ne => "!=",
                    MatchOp::Re => "=~",
                    MatchOp::NotRe => "!~",
                };
                format!("{}{op}{}", m.label, m.value)
            })
            .collect();
        let g: Vec<&str> = s.grouping.iter().map(String::as_str).collect();
        format!("{}{{{}}} by({})", s.metric, ms.join(","), g.join(","))
    }

    #[test]
    fn selectors_of_expressions() {
        let cases: &[(&str, &[&str])] = &[
            ("up", &["up{} by()"]),
            (
                "foo_total{a=\"x\", b!='y', c=~\"z.*\", d!~`w`}",
                &["foo_total{a=x,b!=y,c=~z.*,d!~w} by()"],
            ),
            ("rate(foo_total[5m])", &["foo_total{} by()"]),
            (
                "rate(foo_total{code=\"503\"}[$__rate_interval])",
                &["foo_total{code=503} by()"],
            ),
            (
                "sum by (target) (rate(a_total[5m]))",
                &["a_total{} by(target)"],
            ),
            (
                "sum(rate(a_total[5m])) by (target, verb)",
                &["a_total{} by(target,verb)"],
            ),
            ("sum without (pod) (a)", &["a{} by(pod)"]),
            (
                "histogram_quantile(0.99, sum by (le, verb) (rate(d_bucket{target=~\"$target\"}[10m])))",
                &["d_bucket{target=~$target} by(le,verb)"],
            ),
            (
                "sum by (t) (rate(a_total{x=\"1\"}[5m])) / sum by (t) (rate(a_total[5m])) > 0.05",
                &["a_total{x=1} by(t)", "a_total{} by(t)"],
            ),
            (
                "max by (target) (p{state=\"healthy\"}) == 0 and max by (target) (p{state=~\"q|h\"}) > 0",
                &["p{state=healthy} by(target)", "p{state=~q|h} by(target)"],
            ),
            // Labels of an outer aggregation reach inner selectors; an inner one's stay inside.
            (
                "max by (a) (sum by (a, b) (x)) + y",
                &["x{} by(a,b)", "y{} by()"],
            ),
            (
                "a * on (pod) group_left (node) b",
                &["a{} by(node,pod)", "b{} by(node,pod)"],
            ),
            (
                "(a / ignoring (code) b) or c",
                &["a{} by(code)", "b{} by(code)", "c{} by()"],
            ),
            (
                "{__name__=\"a_total\", job=\"x\"}",
                &["a_total{job=x} by()"],
            ),
            ("topk(5, a) offset 5m", &["a{} by()"]),
            ("count_values(\"v\", build_info)", &["build_info{} by()"]),
            (
                "a > bool 1e-3 and b unless c or d",
                &["a{} by()", "b{} by()", "c{} by()", "d{} by()"],
            ),
            ("absent(a{x=\"\\\"quoted\\\"\"})", &["a{x=\"quoted\"} by()"]),
            ("sum(rate(a_total[5m:30s]))", &["a_total{} by()"]),
            (
                "sum by (namespace) (a{ns=~\"${namespace}\"}) * $scale",
                &["a{ns=~${namespace}} by(namespace)"],
            ),
            ("a @ start()", &["a{} by()"]),
            ("1 + 2", &[]),
        ];
        for (expr, want) in cases {
            let got: Vec<String> = selectors(expr)
                .unwrap_or_else(|e| panic!("{expr}: {e}"))
                .iter()
                .map(show)
                .collect();
            assert_eq!(&got, want, "{expr}");
        }
    }

    #[test]
    fn malformed_expressions_are_errors() {
        let cases: &[(&str, ParseError)] = &[
            ("sum(rate(a[5m])", ParseError::Unbalanced('(', 3)),
            ("a{x=\"1\"", ParseError::Unbalanced('{', 1)),
            ("a{x=\"1}", ParseError::Unterminated(4)),
            ("rate(a[5m)", ParseError::Unterminated(6)),
            ("a{x}", ParseError::BadMatchers(1)),
            ("a{x=1}", ParseError::BadMatchers(1)),
            ("{job=\"x\"}", ParseError::NoMetricName(0)),
            ("{__name__=~\"a.*\"}", ParseError::NoMetricName(0)),
            (
                "sum by target (a)",
                ParseError::BadLabelList("by".into(), 4),
            ),
            ("a ? b", ParseError::Unexpected('?', 2)),
        ];
        for (expr, want) in cases {
            assert_eq!(selectors(expr).as_ref(), Err(want), "{expr}");
        }
    }

    #[test]
    fn labels_join_matchers_and_grouping() {
        let s = &selectors("sum by (le) (rate(h_bucket{verb=\"get\"}[1m]))").unwrap()[0];
        assert_eq!(s.labels().into_iter().collect::<Vec<_>>(), ["le", "verb"]);
    }
}
