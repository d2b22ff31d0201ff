//! Demo steps: kubectl commands that are printed for people and run by `--check`, from the same
//! data, so the printed instructions are the tested ones.

use std::time::Duration;

use test_cluster::ControlPlane;
use tokio::io::{AsyncBufReadExt, BufReader};

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

/// What a step must show.
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

/// One kubectl command of the demo.
#[derive(Clone, Debug)]
pub struct Step {
    pub title: String,
    pub on: On,
    pub args: Vec<String>,
    pub expect: Expect,
}

impl Step {
    pub fn new(title: impl Into<String>, on: On, args: &[&str], expect: Expect) -> Self {
        Self {
            title: title.into(),
            on,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            expect,
        }
    }

    /// The command as a person types it after `source <state>/env`.
    pub fn command_line(&self) -> String {
        let mut line = format!("$KUBECTL --kubeconfig {}", self.on.kubeconfig_var());
        for a in &self.args {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        if matches!(self.expect, Expect::WatchShows(_)) {
            line.push_str("    # Ctrl-C ends the watch");
        }
        line
    }

    /// Runs the step; `Err` says what was wrong.
    pub async fn run(&self, cp: &ControlPlane) -> Result<(), String> {
        let cluster = cp.cluster(self.on.cluster_name());
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        if let Expect::WatchShows(wanted) = &self.expect {
            return watch_shows(cluster.kubectl(), &args, wanted).await;
        }
        let result = tokio::time::timeout(Duration::from_secs(60), cluster.kubectl_ok(&args))
            .await
            .map_err(|_| "kubectl did not finish in 60 s".to_owned())?;
        match (&self.expect, result) {
            (Expect::Success, Ok(_)) => Ok(()),
            (Expect::Contains(wanted), Ok(out)) => {
                match wanted.iter().find(|w| !out.contains(*w)) {
                    None => Ok(()),
                    Some(w) => Err(format!("the output lacks {w:?}:\n{out}")),
                }
            }
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
