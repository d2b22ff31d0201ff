//! Validation of a PUT tunnel configuration, as the real API does it.
//!
//! The API runs cloudflared's ingress validation on the document and answers HTTP 400 with
//! code 1056 and the message `Bad Configuration: Validation failed: <cloudflared message>`
//! (a real response quoted in public client code reads
//! `{"code":1056,"message":"Bad Configuration: Validation failed: The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)\n"}`;
//! the same message appears in cloudflare/terraform-provider-cloudflare#2327).
//!
//! The rules and messages below are cloudflared's `ingress/ingress.go` (`validate`,
//! `validateHostname`, `ErrNoIngressRules`, `errLastRuleNotCatchAll`, `errBadWildcard`,
//! `errHostnameContainsPort`, `errRuleShouldNotBeCatchAll`), the accepted service schemes are the
//! ones listed for `service` on
//! <https://developers.cloudflare.com/api/resources/zero_trust/subresources/tunnels/subresources/cloudflared/subresources/configurations/methods/update/>,
//! and the "at least one ingress rule" requirement is stated on the same page. The 1,000-rule cap
//! is the limit the project's controller enforces (spec TG-3/TG-14; the reference
//! implementation's `maxIngressRules`); no Cloudflare page states it, so its message is the
//! double's own.

use serde_json::Value;

/// Error code of every configuration validation failure.
pub const CODE_BAD_CONFIGURATION: i64 = 1056;

/// Most ingress rules the double accepts.
pub const MAX_INGRESS_RULES: usize = 1000;

/// Schemes accepted in a URL `service` (the API's documented list).
const SERVICE_SCHEMES: &[&str] = &[
    "http", "https", "unix", "tcp", "ssh", "rdp", "unix+tls", "smb",
];

/// Validates the `config` object of a PUT body. `Err` carries the complete API message.
pub fn validate_config(config: &Value) -> Result<(), String> {
    fail(validate_inner(config))
}

fn fail(r: Result<(), String>) -> Result<(), String> {
    r.map_err(|m| format!("Bad Configuration: Validation failed: {m}\n"))
}

fn validate_inner(config: &Value) -> Result<(), String> {
    let Some(obj) = config.as_object() else {
        return Err("config must be an object".into());
    };
    let rules = match obj.get("ingress") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(rules)) => rules.as_slice(),
        Some(_) => return Err("ingress must be a list of rules".into()),
    };
    if rules.is_empty() {
        return Err("The config file doesn't contain any ingress rules".into());
    }
    if rules.len() > MAX_INGRESS_RULES {
        return Err(format!(
            "The config file contains {} ingress rules; at most {MAX_INGRESS_RULES} are allowed",
            rules.len()
        ));
    }
    let total = rules.len();
    for (i, rule) in rules.iter().enumerate() {
        let Some(rule) = rule.as_object() else {
            return Err(format!("Rule #{} is not an object", i + 1));
        };
        let text = |key: &str| -> Result<String, String> {
            match rule.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("Rule #{}: {key} must be a string", i + 1)),
            }
        };
        let service = text("service")?;
        let hostname = text("hostname")?;
        let path = text("path")?;
        validate_service(&service)?;
        validate_hostname(&hostname, &path, i, total)?;
        if !path.is_empty() && regex::Regex::new(&path).is_err() {
            return Err(format!("Rule #{} has an invalid regex", i + 1));
        }
    }
    Ok(())
}

fn validate_service(service: &str) -> Result<(), String> {
    if let Some(code) = service.strip_prefix("http_status:") {
        return match code.parse::<u16>() {
            Ok(c) if (100..=599).contains(&c) => Ok(()),
            _ => Err(format!("invalid HTTP status: {code:?}")),
        };
    }
    if service.starts_with("unix:") || service.starts_with("unix+tls:") {
        return Ok(());
    }
    if matches!(
        service,
        "hello_world" | "hello-world" | "helloworld" | "bastion"
    ) {
        return Ok(());
    }
    let invalid_address = || {
        format!("{service} is an invalid address, please make sure it has a scheme and a hostname")
    };
    let (scheme, rest) = service.split_once("://").ok_or_else(invalid_address)?;
    if !SERVICE_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(invalid_address());
    }
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host_only, port) = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, after)) => (h, after.strip_prefix(':')),
            None => return Err(invalid_address()),
        },
        None => match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        },
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!(
            "parse {service:?}: invalid port \":{port}\" after host"
        ));
    }
    if host_only.is_empty() || host_only.chars().any(char::is_whitespace) {
        return Err(invalid_address());
    }
    if !path.is_empty() && path != "/" {
        return Err(format!(
            "{service} is an invalid address, ingress rules don't support proxying to a different path on the origin service. The path will be the same as the eyeball request's path"
        ));
    }
    Ok(())
}

fn validate_hostname(hostname: &str, path: &str, index: usize, total: usize) -> Result<(), String> {
    if let Some((_, port)) = hostname.rsplit_once(':')
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
    {
        return Err("Hostname cannot contain a port".into());
    }
    if hostname.rfind('*').is_some_and(|at| at > 0) {
        return Err(
            "Hostname patterns can have at most one wildcard character (\"*\") and it can only be used for subdomains, e.g. \"*.example.com\"".into(),
        );
    }
    let is_catch_all = (hostname.is_empty() || hostname == "*") && path.is_empty();
    let is_last = index + 1 == total;
    if is_last && !is_catch_all {
        return Err(
            "The last ingress rule must match all URLs (i.e. it should not have a hostname or path filter)".into(),
        );
    }
    if !is_last && is_catch_all {
        return Err(format!(
            "Rule #{} is matching the hostname '{hostname}', but this will match every hostname, meaning the rules which follow it will never be triggered.",
            index + 1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(ingress: Value) -> Result<(), String> {
        validate_config(&json!({ "ingress": ingress }))
    }

    fn catch_all() -> Value {
        json!({"service": "http_status:404"})
    }

    #[test]
    fn accepts_documented_shapes() {
        check(json!([
            {"hostname": "a.example.com", "service": "http://localhost:8080"},
            {"hostname": "*.example.com", "path": "^/api/.*", "service": "https://10.0.0.1:8443",
             "originRequest": {"noTLSVerify": true}},
            {"hostname": "ssh.example.com", "service": "ssh://localhost:22"},
            {"hostname": "sock.example.com", "service": "unix:/run/app.sock"},
            {"hostname": "v6.example.com", "service": "http://[::1]:8080"},
            {"service": "http_status:404"}
        ]))
        .unwrap();
        check(json!([{"hostname": "*", "service": "http_status:503"}])).unwrap();
    }

    #[test]
    fn refusals_carry_cloudflared_messages() {
        let cases = [
            (json!([]), "doesn't contain any ingress rules"),
            (
                json!([{"hostname": "a.example.com", "service": "http://x:1"}]),
                "The last ingress rule must match all URLs",
            ),
            (
                json!([{"hostname": "", "service": "http://x:1"}, catch_all()]),
                "Rule #1 is matching the hostname ''",
            ),
            (
                json!([{"hostname": "a.*.example.com", "service": "http://x:1"}, catch_all()]),
                "at most one wildcard",
            ),
            (
                json!([{"hostname": "a.example.com:8443", "service": "http://x:1"}, catch_all()]),
                "Hostname cannot contain a port",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "localhost:8080"}, catch_all()]),
                "invalid address",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "ftp://x"}, catch_all()]),
                "invalid address",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "http://x:80/sub"}, catch_all()]),
                "different path",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "http://x:80 "}, catch_all()]),
                "invalid port \":80 \" after host",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "http_status:abc"}, catch_all()]),
                "invalid HTTP status",
            ),
            (
                json!([{"hostname": "a.example.com", "path": "(", "service": "http://x"}, catch_all()]),
                "Rule #1 has an invalid regex",
            ),
            (
                json!([{"hostname": "a.example.com", "service": "http://x"}, {"service": "http_status:404", "path": "/x"}]),
                "The last ingress rule must match all URLs",
            ),
        ];
        for (ingress, want) in cases {
            let err = check(ingress.clone()).unwrap_err();
            assert!(
                err.starts_with("Bad Configuration: Validation failed: ") && err.contains(want),
                "{ingress} -> {err}"
            );
        }
    }

    #[test]
    fn rule_cap_is_exactly_one_thousand() {
        let mut rules: Vec<Value> = (0..MAX_INGRESS_RULES - 1)
            .map(|i| json!({"hostname": format!("h{i}.example.com"), "service": "http://localhost:8080"}))
            .collect();
        rules.push(catch_all());
        check(Value::Array(rules.clone())).unwrap();
        rules.insert(
            0,
            json!({"hostname": "extra.example.com", "service": "http://x"}),
        );
        let err = check(Value::Array(rules)).unwrap_err();
        assert!(err.contains("1001 ingress rules"), "{err}");
    }

    #[test]
    fn missing_ingress_is_refused() {
        let err = validate_config(&json!({"warp-routing": {"enabled": true}})).unwrap_err();
        assert!(err.contains("doesn't contain any ingress rules"));
    }
}
