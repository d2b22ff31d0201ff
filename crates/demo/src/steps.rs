//! Demo steps: commands that are printed for people and run by `--check`, from the same data,
//! so the printed instructions are the tested ones. A step is a kubectl command, or an HTTP GET
//! printed as the equivalent `curl` and performed in Rust with the same headers.

use std::time::Duration;

use test_cluster::ControlPlane;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long `--check` retries an HTTP step: what it shows is delivered asynchronously.
const HTTP_RETRY: Duration = Duration::from_secs(30);

/// Which cluster a command talks to.
#[derive(Clone, Copy, Debug)]
pub enum On {
    Client,
    Target,
}

impl On {
    fn cluster_name(self) -> &'static str {
        match self {
            On::Client => "client",
            On::Target => "target",
        }
    }

    fn kubeconfig_var(self) -> &'static str {
        match self {
            On::Client => "$KUBECONFIG_CLIENT",
            On::Target => "$KUBECONFIG_TARGET",
        }
    }
}

/// What a kubectl step must show.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Exit 0.
    Success,
    /// Exit 0 and stdout contains every string.
    Contains(Vec<String>),
    /// Exit 0 and stdout does not contain the string.
    Lacks(String),
    /// A non-zero exit whose stderr contains the string.
    FailsWith(String),
    /// A watch (`get -w`) that prints a line containing the string; `--check` stops it then.
    WatchShows(String),
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum Action {
    /// `kubectl <args>` against a cluster.
    Kubectl {
        on: On,
        args: Vec<String>,
        expect: Expect,
    },
    /// `GET url` with these headers, expecting a 2xx answer whose body contains every string.
    HttpGet {
        url: String,
        headers: Vec<(String, String)>,
        body_contains: Vec<String>,
    },
}

/// One command of the demo.
#[derive(Clone, Debug)]
pub struct Step {
    pub title: String,
    pub action: Action,
}

impl Step {
    /// A kubectl step.
    pub fn new(title: impl Into<String>, on: On, args: &[&str], expect: Expect) -> Self {
        Self {
            title: title.into(),
            action: Action::Kubectl {
                on,
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                expect,
            },
        }
    }

    /// An HTTP GET step; `--check` retries it for up to 30 s until the answer is as expected.
    pub fn http_get(
        title: impl Into<String>,
        url: impl Into<String>,
        headers: &[(&str, &str)],
        body_contains: &[&str],
    ) -> Self {
        Self {
            title: title.into(),
            action: Action::HttpGet {
                url: url.into(),
                headers: headers
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                    .collect(),
                body_contains: body_contains.iter().map(|s| (*s).to_owned()).collect(),
            },
        }
    }

    /// The command as a person types it after `source <state>/env`.
    pub fn command_line(&self) -> String {
        match &self.action {
            Action::Kubectl { on, args, expect } => {
                let mut line = format!("$KUBECTL --kubeconfig {}", on.kubeconfig_var());
                for a in args {
                    line.push(' ');
                    line.push_str(&shell_quote(a));
                }
                if matches!(expect, Expect::WatchShows(_)) {
                    line.push_str("    # Ctrl-C ends the watch");
                }
                line
            }
            Action::HttpGet { url, headers, .. } => {
                let mut line = "curl -s".to_owned();
                for (name, value) in headers {
                    line.push_str(" -H ");
                    line.push_str(&shell_quote(&format!("{name}: {value}")));
                }
                line.push(' ');
                line.push_str(&shell_quote(url));
                line
            }
        }
    }

    /// Runs the step; `Err` says what was wrong.
    pub async fn run(&self, cp: &ControlPlane) -> Result<(), String> {
        match &self.action {
            Action::Kubectl { on, args, expect } => run_kubectl(cp, *on, args, expect).await,
            Action::HttpGet {
                url,
                headers,
                body_contains,
            } => http_get(url, headers, body_contains, HTTP_RETRY).await,
        }
    }
}

async fn run_kubectl(
    cp: &ControlPlane,
    on: On,
    args: &[String],
    expect: &Expect,
) -> Result<(), String> {
    let cluster = cp.cluster(on.cluster_name());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Expect::WatchShows(wanted) = expect {
        return watch_shows(cluster.kubectl(), &args, wanted).await;
    }
    let result = tokio::time::timeout(Duration::from_secs(60), cluster.kubectl_ok(&args))
        .await
        .map_err(|_| "kubectl did not finish in 60 s".to_owned())?;
    match (expect, result) {
        (Expect::Success, Ok(_)) => Ok(()),
        (Expect::Contains(wanted), Ok(out)) => match wanted.iter().find(|w| !out.contains(*w)) {
            None => Ok(()),
            Some(w) => Err(format!("the output lacks {w:?}:\n{out}")),
        },
        (Expect::Lacks(unwanted), Ok(out)) => {
            if out.contains(unwanted) {
                Err(format!("the output shows {unwanted:?}:\n{out}"))
            } else {
                Ok(())
            }
        }
        (Expect::FailsWith(wanted), Err(e)) => {
            let e = e.to_string();
            if e.contains(wanted) {
                Ok(())
            } else {
                Err(format!("it failed, but without {wanted:?}: {e}"))
            }
        }
        (Expect::FailsWith(wanted), Ok(out)) => Err(format!(
            "it succeeded, but should have failed with {wanted:?}:\n{out}"
        )),
        (_, Err(e)) => Err(e.to_string()),
        (Expect::WatchShows(_), Ok(_)) => unreachable!("handled above"),
    }
}

/// GETs `url` until it answers 2xx with a body containing every string of `wanted`, for up to
/// `retry`.
async fn http_get(
    url: &str,
    headers: &[(String, String)],
    wanted: &[String],
    retry: Duration,
) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("building the HTTP client: {e}"))?;
    let deadline = tokio::time::Instant::now() + retry;
    loop {
        let last = match get_once(&client, url, headers).await {
            Ok((status, body)) => {
                let missing = wanted.iter().find(|w| !body.contains(w.as_str()));
                match (status.is_success(), missing) {
                    (true, None) => return Ok(()),
                    (true, Some(w)) => format!("the answer ({status}) lacks {w:?}:\n{body}"),
                    (false, _) => format!("the answer is {status}:\n{body}"),
                }
            }
            Err(e) => e,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("after {} s, {last}", retry.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn get_once(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
) -> Result<(reqwest::StatusCode, String), String> {
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("reading the answer of GET {url}: {e}"))?;
    Ok((status, body))
}

/// Starts `kubectl <args>` (a watch) and waits up to 30 s for a line containing `wanted`.
async fn watch_shows(
    mut cmd: tokio::process::Command,
    args: &[&str],
    wanted: &str,
) -> Result<(), String> {
    let mut child = cmd
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("starting kubectl: {e}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = String::new();
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let hit = line.contains(wanted);
            seen.push_str(&line);
            seen.push('\n');
            if hit {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let _ = child.kill().await;
    if found {
        Ok(())
    } else {
        Err(format!(
            "the watch did not show {wanted:?} in 30 s:\n{seen}"
        ))
    }
}

/// Runs every step in order, printing PASS or FAIL for each; true when all pass.
pub async fn check(cp: &ControlPlane, steps: &[Step]) -> bool {
    let mut failed = 0;
    for step in steps {
        match step.run(cp).await {
            Ok(()) => println!("PASS  {}\n      {}", step.title, step.command_line()),
            Err(why) => {
                failed += 1;
                println!(
                    "FAIL  {}\n      {}\n      {}",
                    step.title,
                    step.command_line(),
                    why.replace('\n', "\n      ")
                );
            }
        }
    }
    println!("{} of {} steps passed", steps.len() - failed, steps.len());
    failed == 0
}

/// Quotes `s` for a POSIX shell when it holds anything but plainly safe characters.
pub fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if safe {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_leaves_plain_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("get"), "get");
        assert_eq!(shell_quote("/a/b.yaml"), "/a/b.yaml");
        assert_eq!(
            shell_quote(r#"{"spec":{"size":3}}"#),
            r#"'{"spec":{"size":3}}'"#
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn http_steps_print_as_curl_with_their_headers() {
        let step = Step::http_get(
            "t",
            "http://127.0.0.1:8080/greet",
            &[("Host", "hello.demo.example")],
            &["hello"],
        );
        assert_eq!(
            step.command_line(),
            "curl -s -H 'Host: hello.demo.example' http://127.0.0.1:8080/greet"
        );
    }

    /// A server answering every request with `200` and the request head as the body.
    async fn echo_server() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    head.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.write_all(&head).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn http_checks_send_the_printed_headers_and_say_what_the_answer_lacks() {
        test_cluster::install_crypto_provider();
        let url = format!("http://127.0.0.1:{}/greet", echo_server().await);
        let headers = vec![("Host".to_owned(), "hello.demo.example".to_owned())];
        http_get(
            &url,
            &headers,
            &[
                "GET /greet".to_owned(),
                "host: hello.demo.example".to_owned(),
            ],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let err = http_get(
            &url,
            &headers,
            &["never there".to_owned()],
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(err.contains(r#"lacks "never there""#), "{err}");
    }

    #[test]
    fn command_lines_use_the_env_file_variables() {
        let step = Step::new(
            "t",
            On::Target,
            &["get", "widgets", "-o", "jsonpath={.items}"],
            Expect::Success,
        );
        assert_eq!(
            step.command_line(),
            "$KUBECTL --kubeconfig $KUBECONFIG_TARGET get widgets -o 'jsonpath={.items}'"
        );
    }
}
