//! DNS name syntax checks shared by the configuration and the label-selector validation.

/// RFC 1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric, at most 63.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter.
pub(crate) fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// RFC 1123 subdomain: dot-separated RFC 1123 labels, at most 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_rules() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("a-1"));
        assert!(is_dns1123_label("1a"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_label(&"a".repeat(63)));
    }

    #[test]
    fn dns1035_label_starts_with_a_letter() {
        assert!(is_dns1035_label("v1"));
        assert!(!is_dns1035_label("1v"));
    }

    #[test]
    fn subdomain_rules() {
        assert!(is_dns1123_subdomain("example.com"));
        assert!(is_dns1123_subdomain("a"));
        assert!(!is_dns1123_subdomain("example..com"));
        assert!(!is_dns1123_subdomain(".example.com"));
        assert!(!is_dns1123_subdomain("example.com."));
        assert!(!is_dns1123_subdomain("Example.com"));
        assert!(!is_dns1123_subdomain(&format!("{}.com", "a.".repeat(126))));
    }
}
