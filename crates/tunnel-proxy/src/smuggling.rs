//! Detection of HTTP/1 request heads that carry both `Content-Length` and
//! `Transfer-Encoding`.
//!
//! hyper resolves that conflict itself (Transfer-Encoding wins, Content-Length is dropped from
//! the header map, the connection closes afterwards), so the handler cannot see it. The
//! proxy's policy is stricter: such a request is refused with 400 and never forwarded. This
//! module watches the bytes hyper reads with a small HTTP/1 framing scanner (heads, fixed and
//! chunked bodies) and raises a per-connection flag when a head has both headers. Because hyper
//! closes the connection after such a request, the flag never needs resetting. HTTP/2
//! connections (prior-knowledge preface) are not scanned.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";
/// Longest header line kept for inspection; longer lines are only counted.
const LINE_KEEP: usize = 64;

#[derive(Debug)]
enum Scan {
    /// Reading a request head line by line.
    Head {
        line: Vec<u8>,
        first_line: bool,
        content_length: Option<u64>,
        chunked: bool,
        any_te: bool,
    },
    Fixed(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    ChunkDataEnd(u8),
    Trailers {
        line_empty: bool,
    },
    /// HTTP/2, or bytes the scanner cannot follow: stop looking.
    Off,
}

impl Scan {
    fn head() -> Self {
        Self::Head {
            line: Vec::new(),
            first_line: true,
            content_length: None,
            chunked: false,
            any_te: false,
        }
    }
}

/// The scanner state of one connection.
#[derive(Debug)]
pub struct Scanner {
    state: Scan,
    seen: usize,
    flag: Arc<AtomicBool>,
}

impl Scanner {
    pub fn new(flag: Arc<AtomicBool>) -> Self {
        Self {
            state: Scan::head(),
            seen: 0,
            flag,
        }
    }

    /// Feeds bytes as they are read from the client.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                Scan::Off => return,
                Scan::Fixed(n) => {
                    let take = (*n).min(data.len() as u64) as usize;
                    *n -= take as u64;
                    data = &data[take..];
                    if *n == 0 {
                        self.state = Scan::head();
                    }
                }
                Scan::ChunkData(n) => {
                    let take = (*n).min(data.len() as u64) as usize;
                    *n -= take as u64;
                    data = &data[take..];
                    if *n == 0 {
                        self.state = Scan::ChunkDataEnd(2);
                    }
                }
                Scan::ChunkDataEnd(left) => {
                    *left -= 1;
                    if *left == 0 {
                        self.state = Scan::ChunkSize(Vec::new());
                    }
                    data = &data[1..];
                }
                Scan::ChunkSize(line) => {
                    let b = data[0];
                    data = &data[1..];
                    if b != b'\n' {
                        if line.len() < LINE_KEEP {
                            line.push(b);
                        }
                        continue;
                    }
                    let text = String::from_utf8_lossy(line);
                    let size = text.split(';').next().unwrap_or("").trim();
                    self.state = match u64::from_str_radix(size, 16) {
                        Ok(0) => Scan::Trailers { line_empty: true },
                        Ok(n) => Scan::ChunkData(n),
                        Err(_) => Scan::Off,
                    };
                }
                Scan::Trailers { line_empty } => {
                    let b = data[0];
                    data = &data[1..];
                    match b {
                        b'\n' if *line_empty => self.state = Scan::head(),
                        b'\n' => *line_empty = true,
                        b'\r' => {}
                        _ => *line_empty = false,
                    }
                }
                Scan::Head { .. } => {
                    let b = data[0];
                    data = &data[1..];
                    self.seen += 1;
                    self.head_byte(b);
                }
            }
        }
    }

    fn head_byte(&mut self, b: u8) {
        let Scan::Head {
            line,
            first_line,
            content_length,
            chunked,
            any_te,
        } = &mut self.state
        else {
            return;
        };
        if b != b'\n' {
            if line.len() < LINE_KEEP {
                line.push(b);
            }
            if self.seen == H2_PREFACE.len() && line.as_slice() == H2_PREFACE {
                self.state = Scan::Off;
            }
            return;
        }
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        if text.is_empty() {
            if *first_line {
                // blank lines before a request line are tolerated by hyper
                return;
            }
            if *any_te && content_length.is_some() {
                self.flag.store(true, Ordering::Relaxed);
            }
            self.state = if *chunked {
                Scan::ChunkSize(Vec::new())
            } else {
                match *content_length {
                    Some(n) if n > 0 => Scan::Fixed(n),
                    _ => Scan::head(),
                }
            };
            return;
        }
        if !*first_line {
            if let Some(value) = header_value(text, b"content-length") {
                *content_length = value.trim().parse().ok().or(Some(0));
            } else if let Some(value) = header_value(text, b"transfer-encoding") {
                *any_te = true;
                *chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
            }
        }
        *first_line = false;
        line.clear();
    }
}

fn header_value(line: &[u8], name: &[u8]) -> Option<String> {
    let (n, rest) = line.split_at_checked(name.len())?;
    let value = rest.strip_prefix(b":")?;
    n.eq_ignore_ascii_case(name)
        .then(|| String::from_utf8_lossy(value).into_owned())
}

pin_project_lite::pin_project! {
    /// A client connection whose incoming bytes go through a [`Scanner`].
    pub struct Sniffed<T> {
        #[pin]
        inner: T,
        scanner: Scanner,
    }
}

impl<T> Sniffed<T> {
    pub fn new(inner: T, flag: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            scanner: Scanner::new(flag),
        }
    }
}

impl<T: AsyncRead> AsyncRead for Sniffed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.inner.poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            this.scanner.feed(&buf.filled()[before..]);
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for Sniffed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; returns whether the flag was raised.
    fn scan(input: &[u8], step: usize) -> bool {
        let flag = Arc::new(AtomicBool::new(false));
        let mut s = Scanner::new(flag.clone());
        for chunk in input.chunks(step) {
            s.feed(chunk);
        }
        flag.load(Ordering::Relaxed)
    }

    #[test]
    fn flags_content_length_with_transfer_encoding_in_either_order() {
        let rows: [(&[u8], bool); 9] = [
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true),
            (b"POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 0\r\n\r\n0\r\n\r\n", true),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", false),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false),
            // a body that looks like headers is skipped by framing
            (b"POST / HTTP/1.1\r\nContent-Length: 47\r\n\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n", false),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2f\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false),
            // the second, pipelined request is the smuggling one
            (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", true),
            (b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", true),
            // HTTP/2 prior knowledge is not scanned
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n", false),
        ];
        for (input, want) in rows {
            for step in [1, 3, input.len()] {
                assert_eq!(
                    scan(input, step),
                    want,
                    "{:?} in steps of {step}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }
}
