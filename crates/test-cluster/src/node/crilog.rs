//! Container logs in the CRI format the kubelet reads (`<RFC 3339 time> <stream> F <line>`), so
//! the log endpoint can answer `sinceTime` and `timestamps`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use crate::Error;
use crate::process::ManagedProcess;

/// Copies the process's stdout and stderr, line by line with the time each arrived, to `path`
/// (appending: a restarted container's lines follow the previous run's). The copying threads end
/// when the process (and whatever inherited its output) has closed the pipes.
pub(super) fn capture(process: &mut ManagedProcess, path: &Path) -> Result<(), Error> {
    let file = File::options()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let file = Arc::new(Mutex::new(file));
    let (stdout, stderr) = process.take_output();
    if let Some(out) = stdout {
        copy("stdout", out, Arc::clone(&file));
    }
    if let Some(err) = stderr {
        copy("stderr", err, file);
    }
    Ok(())
}

fn copy(stream: &'static str, pipe: impl Read + Send + 'static, file: Arc<Mutex<File>>) {
    let spawned = std::thread::Builder::new()
        .name(format!("log-{stream}"))
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let text = line.strip_suffix(b"\n").unwrap_or(&line);
                let time = k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%S%.9fZ")
                    .to_string();
                let mut record = format!("{time} {stream} F ").into_bytes();
                record.extend_from_slice(text);
                record.push(b'\n');
                let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
                if file.write_all(&record).is_err() {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "starting a container log copier");
    }
}

/// One log line: when it arrived, and its text (without the newline).
pub(super) struct Line<'a> {
    pub(super) time: &'a str,
    pub(super) text: &'a [u8],
}

/// Parses one line of a CRI log file.
pub(super) fn parse(line: &[u8]) -> Option<Line<'_>> {
    let mut fields = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(fields.next()?).ok()?;
    let _stream = fields.next()?;
    let _tag = fields.next()?;
    let text = fields.next()?;
    Some(Line {
        time,
        text: text.strip_suffix(b"\n").unwrap_or(text),
    })
}
