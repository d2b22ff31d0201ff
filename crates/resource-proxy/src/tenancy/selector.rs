//! Label selectors (RP-7): the caller's selector ANDed with the owner selector.
//!
//! In `owned` mode, list, watch and delete-collection requests carry
//! `vcluster.com/owner-project=<project>,vcluster.com/owner-vcluster=<name>` in addition to the
//! caller's selector. A selector is a conjunction of requirements, so adding requirements can
//! only narrow what matches: a caller's `vcluster.com/owner-vcluster!=x` or a duplicate key just
//! makes the result smaller or empty. To be sure the target reads the same conjunction, the
//! caller's selector is parsed here with the Kubernetes grammar (`labels.Parse`), an invalid one
//! is answered with the 400 BadRequest the API server gives (same messages), and the target gets
//! a selector re-rendered from the parsed requirements, never the caller's text.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::api::status::Status;
use crate::config::dns::is_dns1123_subdomain;
use crate::tenancy::labels::{OWNER_PROJECT_LABEL, OWNER_VCLUSTER_LABEL, OwnerLabels};

/// An invalid label selector; the message is the API server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    message: String,
}

impl SelectorError {
    fn new(message: impl Into<String>) -> Self {
        SelectorError {
            message: message.into(),
        }
    }

    /// The 400 BadRequest Status the API server answers an invalid selector with.
    pub fn status(&self) -> Status {
        Status::bad_request(self.message.clone())
    }
}

/// A requirement's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value`
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>5`
    GreaterThan,
    /// `key<5`
    LessThan,
}

/// One requirement: key, operator and values (sorted, without duplicates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn matches<'a>(&self, get: &impl Fn(&str) -> Option<&'a str>) -> bool {
        let value = get(&self.key);
        let listed = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => value.is_some_and(listed),
            Operator::NotEquals | Operator::NotIn => !value.is_some_and(listed),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(want)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.values.join(",");
        match self.operator {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={values}", self.key),
            Operator::DoubleEquals => write!(f, "{}=={values}", self.key),
            Operator::NotEquals => write!(f, "{}!={values}", self.key),
            Operator::In => write!(f, "{} in ({values})", self.key),
            Operator::NotIn => write!(f, "{} notin ({values})", self.key),
            Operator::GreaterThan => write!(f, "{}>{values}", self.key),
            Operator::LessThan => write!(f, "{}<{values}", self.key),
        }
    }
}

/// A parsed selector: the AND of its requirements, kept sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Parses a selector with the Kubernetes grammar; the empty string selects everything.
    pub fn parse(selector: &str) -> Result<Selector, SelectorError> {
        let mut requirements = Parser::new(selector).parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector { requirements })
    }

    /// The selector matching exactly the owner labels.
    pub fn owner(owner: &OwnerLabels) -> Selector {
        let requirement = |key: &str, value: &str| Requirement {
            key: key.to_owned(),
            operator: Operator::Equals,
            values: vec![value.to_owned()],
        };
        Selector {
            requirements: vec![
                requirement(OWNER_PROJECT_LABEL, &owner.project),
                requirement(OWNER_VCLUSTER_LABEL, &owner.vcluster),
            ],
        }
    }

    /// This selector AND `other`.
    pub fn and(mut self, other: Selector) -> Selector {
        self.requirements.extend(other.requirements);
        self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        self
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether labels (looked up by `get`) satisfy every requirement.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(&get))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The caller's selector (absent = everything) ANDed with the owner selector, rendered.
pub fn scoped_selector(caller: Option<&str>, owner: &OwnerLabels) -> Result<String, SelectorError> {
    let caller = Selector::parse(caller.unwrap_or(""))?;
    Ok(caller.and(Selector::owner(owner)).to_string())
}

/// Rewrites a raw query string so its `labelSelector` is the caller's (the first value, as the
/// API server reads it) ANDed with the owner selector. Every other parameter is kept; every
/// `labelSelector` the caller sent is replaced by exactly one.
pub fn scope_query(raw_query: Option<&str>, owner: &OwnerLabels) -> Result<String, SelectorError> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(raw_query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let caller = pairs
        .iter()
        .find(|(k, _)| k == "labelSelector")
        .map(|(_, v)| v.as_str());
    let scoped = scoped_selector(caller, owner)?;
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs.iter().filter(|(k, _)| k != "labelSelector") {
        out.append_pair(k, v);
    }
    out.append_pair("labelSelector", &scoped);
    Ok(out.finish())
}

/// Whether a `metadata.labels` map carries both owner labels with this client's values.
pub fn is_owned(labels: &Map<String, Value>, owner: &OwnerLabels) -> bool {
    Selector::owner(owner).matches(|k| labels.get(k).and_then(Value::as_str))
}

/// Whether an object (JSON) carries both owner labels with this client's values.
pub fn is_owned_object(object: &Value, owner: &OwnerLabels) -> bool {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| is_owned(labels, owner))
}

// ---------------------------------------------------------------------------------------------
// Label key and value syntax, with the messages of k8s.io/apimachinery/pkg/util/validation.

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
     must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
     '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
     (e.g. 'example.com', regex used for validation is \
     '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
     characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. \
     'MyValue',  or 'my_value',  or '12345', regex used for validation is \
     '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_qualified_name_part(s: &str) -> bool {
    let ext = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars().all(ext)
}

/// `validation.IsQualifiedName`.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 characters".to_owned());
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {DNS1123_SUBDOMAIN_MSG}"));
                }
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and \
                 '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    errs
}

/// `validation.IsValidLabelValue`.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(LABEL_VALUE_MSG.to_owned());
    }
    errs
}

/// Go's `%q` for the values in these messages.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// `field.Invalid(path, value, detail).Error()`.
fn invalid(path: &str, value: &str, details: &[String]) -> String {
    format!(
        "{path}: Invalid value: {}: {}",
        quoted(value),
        details.join("; ")
    )
}

fn validate_key(key: &str) -> Result<(), String> {
    let errs = qualified_name_errors(key);
    if errs.is_empty() {
        Ok(())
    } else {
        // The parser validates with a nil field path, which Go prints as `<nil>`.
        Err(invalid("<nil>", key, &errs))
    }
}

/// `labels.NewRequirement`'s checks, with its aggregated message.
fn new_requirement(
    key: String,
    operator: Operator,
    values: Vec<String>,
) -> Result<Requirement, String> {
    let mut errs = Vec::new();
    if let Err(e) = validate_key(&key) {
        errs.push(e);
    }
    if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                errs.push(format!(
                    "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                    quoted(v)
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let value_errs = label_value_errors(v);
        if !value_errs.is_empty() {
            errs.push(invalid(&format!("values[{i}][{key}]"), v, &value_errs));
        }
    }
    match errs.len() {
        0 => Ok(Requirement {
            key,
            operator,
            values,
        }),
        1 => Err(errs.remove(0)),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser of `labels.Parse`.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Error(String),
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier(String),
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

impl Token {
    fn literal(&self) -> &str {
        match self {
            Token::Error(s) | Token::Identifier(s) => s,
            Token::EndOfString => "",
            Token::ClosedPar => ")",
            Token::Comma => ",",
            Token::DoesNotExist => "!",
            Token::DoubleEquals => "==",
            Token::Equals => "=",
            Token::GreaterThan => ">",
            Token::In => "in",
            Token::LessThan => "<",
            Token::NotEquals => "!=",
            Token::NotIn => "notin",
            Token::OpenPar => "(",
        }
    }

    fn symbol(s: &str) -> Option<Token> {
        Some(match s {
            ")" => Token::ClosedPar,
            "," => Token::Comma,
            "!" => Token::DoesNotExist,
            "==" => Token::DoubleEquals,
            "=" => Token::Equals,
            ">" => Token::GreaterThan,
            "<" => Token::LessThan,
            "!=" => Token::NotEquals,
            "(" => Token::OpenPar,
            _ => return None,
        })
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let mut pos = 0;
    let mut tokens = Vec::new();
    loop {
        while pos < chars.len() && is_whitespace(chars[pos]) {
            pos += 1;
        }
        if pos >= chars.len() {
            tokens.push(Token::EndOfString);
            return tokens;
        }
        if is_special(chars[pos]) {
            // Longest run of special characters that still forms an operator.
            let mut buffer = String::new();
            let mut last: Option<(Token, usize)> = None;
            while pos < chars.len() && is_special(chars[pos]) {
                buffer.push(chars[pos]);
                match Token::symbol(&buffer) {
                    Some(token) => {
                        last = Some((token, pos + 1));
                        pos += 1;
                    }
                    None if last.is_some() => break,
                    None => pos += 1,
                }
            }
            match last {
                Some((token, end)) => {
                    pos = end;
                    tokens.push(token);
                }
                None => tokens.push(Token::Error(format!(
                    "error expected: keyword found '{buffer}'"
                ))),
            }
        } else {
            let start = pos;
            while pos < chars.len() && !is_special(chars[pos]) && !is_whitespace(chars[pos]) {
                pos += 1;
            }
            let word: String = chars[start..pos].iter().collect();
            tokens.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word),
            });
        }
    }
}

/// Where the parser is: in value position `in`/`notin` are plain identifiers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<Token>,
    position: usize,
}

impl Parser {
    fn new(input: &str) -> Self {
        Parser {
            tokens: lex(input),
            position: 0,
        }
    }

    fn adjust(token: Token, context: Context) -> Token {
        match (context, token) {
            (Context::Values, Token::In) => Token::Identifier("in".to_owned()),
            (Context::Values, Token::NotIn) => Token::Identifier("notin".to_owned()),
            (_, token) => token,
        }
    }

    fn lookahead(&self, context: Context) -> Token {
        let token = self
            .tokens
            .get(self.position)
            .cloned()
            .unwrap_or(Token::EndOfString);
        Parser::adjust(token, context)
    }

    fn consume(&mut self, context: Context) -> Token {
        let token = self.lookahead(context);
        self.position += 1;
        token
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.lookahead(Context::Values) {
                Token::Identifier(_) | Token::DoesNotExist => {
                    let requirement = self.parse_requirement().map_err(|e| {
                        SelectorError::new(format!("unable to parse requirement: {e}"))
                    })?;
                    requirements.push(requirement);
                    match self.consume(Context::Values) {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let next = self.lookahead(Context::Values);
                            if !matches!(next, Token::Identifier(_) | Token::DoesNotExist) {
                                return Err(SelectorError::new(format!(
                                    "found '{}', expected: identifier after ','",
                                    next.literal()
                                )));
                            }
                        }
                        other => {
                            return Err(SelectorError::new(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                other.literal()
                            )));
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                other => {
                    return Err(SelectorError::new(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.literal()
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(operator) = inferred {
            return new_requirement(key, operator, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, operator, values.into_iter().collect())
    }

    /// The key, and `Exists`/`DoesNotExist` when no binary operator follows.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut token = self.consume(Context::Values);
        let negated = token == Token::DoesNotExist;
        if negated {
            token = self.consume(Context::Values);
        }
        let Token::Identifier(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.literal()));
        };
        validate_key(&key)?;
        let next = self.lookahead(Context::Values);
        let operator = if negated {
            Some(Operator::DoesNotExist)
        } else if matches!(next, Token::EndOfString | Token::Comma) {
            Some(Operator::Exists)
        } else {
            None
        };
        Ok((key, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        Ok(match self.consume(Context::KeyAndOperator) {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.literal()
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let token = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{}' expected: '('", token.literal()));
        }
        match self.lookahead(Context::Values) {
            Token::Identifier(_) | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let closing = self.consume(Context::Values);
                if closing != Token::ClosedPar {
                    return Err(format!("found '{}', expected: ')'", closing.literal()));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            other => Err(format!(
                "found '{}', expected: ',', ')' or identifier",
                other.literal()
            )),
        }
    }

    /// A comma-separated list in which empty entries are the empty value.
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut values = BTreeSet::new();
        loop {
            match self.consume(Context::Values) {
                Token::Identifier(value) => {
                    values.insert(value);
                    match self.lookahead(Context::Values) {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            ));
                        }
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.lookahead(Context::Values) {
                        Token::ClosedPar => {
                            values.insert(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', or identifier",
                        other.literal()
                    ));
                }
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        if matches!(
            self.lookahead(Context::Values),
            Token::EndOfString | Token::Comma
        ) {
            return Ok(BTreeSet::from([String::new()]));
        }
        match self.consume(Context::Values) {
            Token::Identifier(value) => Ok(BTreeSet::from([value])),
            other => Err(format!("found '{}', expected: identifier", other.literal())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner() -> OwnerLabels {
        OwnerLabels::of_test_client()
    }

    fn labels(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        let l = labels(pairs);
        Selector::parse(selector)
            .unwrap()
            .matches(|k| l.get(k).and_then(Value::as_str))
    }

    fn parse_error(selector: &str) -> String {
        Selector::parse(selector).unwrap_err().to_string()
    }

    #[test]
    fn valid_selectors_parse_and_render_canonically() {
        let cases = [
            ("", ""),
            ("   ", ""),
            ("a=b", "a=b"),
            ("a==b", "a==b"),
            ("a!=b", "a!=b"),
            ("a = b", "a=b"),
            ("b=1,a=2", "a=2,b=1"),
            (
                "x in (foo,,baz),y,z notin ()",
                "x in (,baz,foo),y,z notin ()",
            ),
            ("x in (b,a,a)", "x in (a,b)"),
            ("!a", "!a"),
            ("! a", "!a"),
            ("a", "a"),
            (
                "example.com/name=My_Value-1.2",
                "example.com/name=My_Value-1.2",
            ),
            ("a=", "a="),
            ("a=,b", "a=,b"),
            ("a>5,b<3", "a>5,b<3"),
            ("in=notin", "in=notin"),
            ("x in (in,notin)", "x in (in,notin)"),
            ("a in (,)", "a in ()"),
        ];
        for (input, want) in cases {
            let selector = Selector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(selector.to_string(), want, "{input}");
            // The rendering parses back to the same requirements.
            assert_eq!(Selector::parse(want).unwrap(), selector, "{input}");
        }
    }

    #[test]
    fn syntax_errors_carry_the_api_server_messages() {
        let cases = [
            (
                "a b",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("a=b,", "found '', expected: identifier after ','"),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            (
                "a=(b)",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a in (b",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "a in (b c)",
                "unable to parse requirement: found 'c', expected: ',' or ')'",
            ),
            (
                "a in (=)",
                "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            ),
            (
                "a notin",
                "unable to parse requirement: found '' expected: '('",
            ),
            ("a=b)", "found ')', expected: ',' or 'end of string'"),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "a !b",
                "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_error(input), want, "{input}");
        }
    }

    #[test]
    fn invalid_keys_are_reported_like_the_api_server() {
        assert_eq!(
            parse_error("app:monolith"),
            "unable to parse requirement: <nil>: Invalid value: \"app:monolith\": name part must \
             consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for \
             validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            parse_error("app.kubernetes_io/name=x"),
            "unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": \
             prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
             characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert!(parse_error("a/b/c=d").contains("a qualified name must consist of"));
        assert!(parse_error("/b").contains("prefix part must be non-empty"));
        assert!(parse_error("a/").contains("name part must be non-empty"));
        assert!(
            parse_error(&"k".repeat(64)).contains("name part must be no more than 63 characters")
        );
    }

    #[test]
    fn invalid_values_are_reported_with_their_field_path() {
        assert_eq!(
            parse_error("a=b@"),
            "unable to parse requirement: values[0][a]: Invalid value: \"b@\": a valid label must \
             be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or \
             '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert!(
            parse_error(&format!("a={}", "v".repeat(64)))
                .contains("must be no more than 63 characters")
        );
        assert!(parse_error("a<-3").contains("values[0][a]: Invalid value: \"-3\""));
        assert_eq!(
            parse_error("a>x"),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' \
             operators, the value must be an integer"
        );
    }

    #[test]
    fn invalid_selector_maps_to_a_400_bad_request_status() {
        let err = Selector::parse("a=b c").unwrap_err();
        let status = err.status();
        assert_eq!(status.code(), 400);
        assert_eq!(
            status.message(),
            "found 'c', expected: ',' or 'end of string'"
        );
    }

    #[test]
    fn matching_follows_kubernetes_semantics() {
        assert!(matches("a=b", &[("a", "b")]));
        assert!(!matches("a=b", &[("a", "c")]));
        assert!(!matches("a=b", &[]));
        assert!(matches("a!=b", &[]));
        assert!(matches("a!=b", &[("a", "c")]));
        assert!(!matches("a!=b", &[("a", "b")]));
        assert!(matches("a in (x,y)", &[("a", "y")]));
        assert!(matches("a notin (x,y)", &[]));
        assert!(!matches("a notin (x,y)", &[("a", "x")]));
        assert!(matches("a", &[("a", "")]));
        assert!(!matches("!a", &[("a", "")]));
        assert!(matches("a>5", &[("a", "6")]));
        assert!(!matches("a>5", &[("a", "5")]));
        assert!(!matches("a>5", &[("a", "x")]));
        assert!(matches("a<5", &[("a", "-1")]));
        assert!(matches("", &[]));
    }

    #[test]
    fn owner_selector_is_anded_into_the_callers() {
        assert_eq!(
            scoped_selector(None, &owner()).unwrap(),
            "vcluster.com/owner-project=default,vcluster.com/owner-vcluster=client-a"
        );
        assert_eq!(
            scoped_selector(Some("app=web"), &owner()).unwrap(),
            "app=web,vcluster.com/owner-project=default,vcluster.com/owner-vcluster=client-a"
        );
    }

    #[test]
    fn caller_selector_cannot_widen_visibility() {
        let theirs = [
            ("vcluster.com/owner-vcluster", "client-b"),
            ("vcluster.com/owner-project", "default"),
        ];
        let mine = [
            ("vcluster.com/owner-vcluster", "client-a"),
            ("vcluster.com/owner-project", "default"),
        ];
        for caller in [
            "",
            "vcluster.com/owner-vcluster!=client-a",
            "vcluster.com/owner-vcluster=client-b",
            "vcluster.com/owner-vcluster in (client-a,client-b)",
            "!vcluster.com/owner-vcluster",
            "vcluster.com/owner-vcluster notin (client-a)",
            "vcluster.com/owner-vcluster",
        ] {
            let scoped = scoped_selector(Some(caller), &owner()).unwrap();
            assert!(
                !matches(&scoped, &theirs),
                "{caller} -> {scoped} selects another client's object"
            );
            assert!(
                !matches(&scoped, &[]),
                "{caller} -> {scoped} selects an unowned object"
            );
        }
        // A duplicate of the owner requirement is fine and still selects own objects.
        let scoped =
            scoped_selector(Some("vcluster.com/owner-vcluster=client-a"), &owner()).unwrap();
        assert!(matches(&scoped, &mine));
    }

    #[test]
    fn invalid_caller_selector_is_refused_not_forwarded() {
        assert!(scoped_selector(Some("a b"), &owner()).is_err());
        assert!(scope_query(Some("labelSelector=a%20b"), &owner()).is_err());
    }

    #[test]
    fn scope_query_replaces_every_label_selector_and_keeps_other_parameters() {
        let query = scope_query(
            Some("limit=5&labelSelector=app%3Dweb&watch=1&labelSelector=x%3Dy"),
            &owner(),
        )
        .unwrap();
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("limit".to_owned(), "5".to_owned()),
                ("watch".to_owned(), "1".to_owned()),
                (
                    "labelSelector".to_owned(),
                    "app=web,vcluster.com/owner-project=default,vcluster.com/owner-vcluster=client-a"
                        .to_owned()
                ),
            ]
        );
        let only = scope_query(None, &owner()).unwrap();
        assert_eq!(
            only,
            "labelSelector=vcluster.com%2Fowner-project%3Ddefault%2Cvcluster.com%2Fowner-vcluster%3Dclient-a"
        );
    }

    #[test]
    fn scope_query_handles_encoded_parameter_names() {
        let query = scope_query(Some("label%53elector=app%3Dweb"), &owner()).unwrap();
        let selectors: Vec<String> = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "labelSelector")
            .map(|(_, v)| v.into_owned())
            .collect();
        assert_eq!(selectors.len(), 1);
        assert!(selectors[0].starts_with("app=web,"), "{}", selectors[0]);
    }

    #[test]
    fn is_owned_needs_both_labels_with_this_clients_values() {
        let o = owner();
        assert!(is_owned(
            &labels(&[
                ("vcluster.com/owner-vcluster", "client-a"),
                ("vcluster.com/owner-project", "default"),
                ("other", "x")
            ]),
            &o
        ));
        assert!(!is_owned(
            &labels(&[("vcluster.com/owner-vcluster", "client-a")]),
            &o
        ));
        assert!(!is_owned(
            &labels(&[
                ("vcluster.com/owner-vcluster", "client-a"),
                ("vcluster.com/owner-project", "p-default")
            ]),
            &o
        ));
        assert!(!is_owned(&Map::new(), &o));
        assert!(is_owned_object(
            &json!({"metadata": {"labels": {
                "vcluster.com/owner-vcluster": "client-a",
                "vcluster.com/owner-project": "default"}}}),
            &o
        ));
        assert!(!is_owned_object(&json!({"metadata": {"labels": null}}), &o));
        assert!(!is_owned_object(&json!({"metadata": {}}), &o));
        assert!(!is_owned_object(
            &json!({"metadata": {"labels": {
                "vcluster.com/owner-vcluster": ["client-a"],
                "vcluster.com/owner-project": "default"}}}),
            &o
        ));
    }
}
