//! Logging setup for the binaries: structured `tracing` output on stderr, JSON or text, filtered
//! by `RUST_LOG` (default `info`). Stdout stays free for what a binary prints on purpose.

/// How log lines are written (`--log-format text|json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

/// Installs the global subscriber with the default filter `info`. Call once, first thing in
/// `main`.
pub fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the global subscriber; `default_directives` (an `EnvFilter` such as
/// `info,kube_client=off`) apply when `RUST_LOG` is unset or invalid.
pub fn init_with_default(format: LogFormat, default_directives: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_directives));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
