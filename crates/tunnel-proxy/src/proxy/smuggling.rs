//! Detection of HTTP/1 request heads that carry both `Content-Length` and
//! `Transfer-Encoding`, or that are longer than `--max-request-head`.
//!
//! hyper resolves that conflict itself (Transfer-Encoding wins, Content-Length is dropped from
//! the header map, the connection closes afterwards), so the handler cannot see it. The
//! proxy's policy is stricter: such a request is refused with 400 and never forwarded. This
//! module watches the bytes hyper reads with a small HTTP/1 framing scanner (heads, fixed and
//! chunked bodies) and raises a per-connection flag when a head has both headers. Because hyper
//! closes the connection after such a request, the flag never needs resetting. HTTP/2
//! connections (prior-knowledge preface) are not scanned.
//!
//! The same scanner measures each head: hyper's own bound (its read buffer) lets a head
//! somewhat longer than the limit through when one read brings all of it, so a second flag
//! marks a head over the limit, and the request is answered 431 (the answer closes the
//! connection, so this flag never needs resetting either).
//!
//! The fields are read and the framing decided by [`http1_wire`]'s rules, chunked bodies
//! followed by its decoder; what is here is the line scanning over reads.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http1_wire::{
    ChunkedDecoder, ChunkedLimits, ContentLength, FieldSummary, FramingError, TransferCoding,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0";
/// Longest part of a line split across reads that is kept for inspection; the rest is only
/// skipped. Lines that arrive whole in one read are inspected whole.
const CARRY_KEEP: usize = 1024;

/// Where the scanner is in the client's byte stream.
#[derive(Debug, Clone, Copy)]
enum Scan {
    /// Reading a request head line by line.
    Head {
        /// No line of this head seen yet (blank lines before a request line are tolerated).
        first_line: bool,
        fields: FieldSummary,
    },
    /// Skipping a fixed-length body.
    Fixed(u64),
    /// Skipping a chunked body. Unbounded: hyper reads (and bounds) the same bytes.
    Chunked(ChunkedDecoder),
    /// HTTP/2, or bytes the scanner cannot follow: stop looking.
    Off,
}

impl Scan {
    const HEAD: Self = Self::Head {
        first_line: true,
        fields: FieldSummary::EMPTY,
    };
}

/// What the scanner found on one connection.
#[derive(Debug, Default)]
pub struct Flags {
    /// A head had both `Content-Length` and `Transfer-Encoding`.
    pub conflicting_length: AtomicBool,
    /// A head was longer than the limit.
    pub head_too_large: AtomicBool,
}

/// The scanner state of one connection.
///
/// It works on whole slices: body bytes are skipped by count, head lines are found with
/// `memchr` and only lines starting like `content-length` or `transfer-encoding` are looked
/// at. Nothing is copied except the start of a line that a read split (rare).
#[derive(Debug)]
pub struct Scanner {
    state: Scan,
    /// Start of a line split across reads.
    carry: Vec<u8>,
    /// Whether `carry` holds a partial line (it may be empty after a lone `\n` split).
    carrying: bool,
    /// The first line of the connection is still to be read (HTTP/2 preface detection).
    conn_first_line: bool,
    /// Bytes of the current head so far, and how many it may have.
    head_len: usize,
    max_head: usize,
    flags: Arc<Flags>,
}

impl Scanner {
    pub fn new(flags: Arc<Flags>, max_head: usize) -> Self {
        Self {
            state: Scan::HEAD,
            carry: Vec::new(),
            carrying: false,
            conn_first_line: true,
            head_len: 0,
            max_head,
            flags,
        }
    }

    /// Counts `n` more bytes of the current head.
    fn count(&mut self, n: usize) {
        self.head_len = self.head_len.saturating_add(n);
        if self.head_len > self.max_head {
            self.flags.head_too_large.store(true, Ordering::Relaxed);
        }
    }

    /// Feeds bytes as they are read from the client.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.state {
                Scan::Off => return,
                Scan::Fixed(n) => {
                    let take = skip(n, data.len());
                    data = &data[take..];
                    if *n == 0 {
                        self.state = Scan::HEAD;
                    }
                }
                Scan::Chunked(decoder) => match decoder.feed(data) {
                    Ok(Some(end)) => {
                        data = &data[end..];
                        self.state = Scan::HEAD;
                    }
                    Ok(None) => return,
                    Err(_) => self.state = Scan::Off,
                },
                Scan::Head { .. } => {
                    let Some(nl) = memchr::memchr(b'\n', data) else {
                        self.count(data.len());
                        self.keep(data);
                        return;
                    };
                    self.count(nl + 1);
                    let (line, rest) = (&data[..nl], &data[nl + 1..]);
                    data = rest;
                    if self.carrying {
                        self.keep(line);
                        let carried = std::mem::take(&mut self.carry);
                        self.carrying = false;
                        self.line(&carried);
                        self.carry = carried;
                        self.carry.clear();
                    } else {
                        self.line(line);
                    }
                }
            }
        }
    }

    fn keep(&mut self, part: &[u8]) {
        self.carrying = true;
        let room = CARRY_KEEP.saturating_sub(self.carry.len());
        self.carry.extend_from_slice(&part[..part.len().min(room)]);
    }

    /// One complete line (without its `\n`) of a head.
    fn line(&mut self, line: &[u8]) {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let Scan::Head { first_line, fields } = &mut self.state else {
            return;
        };
        if std::mem::take(&mut self.conn_first_line) && text == H2_PREFACE_LINE {
            self.state = Scan::Off;
            return;
        }
        if text.is_empty() {
            // A head ends, or (blank lines before a request line) none started.
            self.head_len = 0;
            if *first_line {
                // blank lines before a request line are tolerated by hyper
                return;
            }
            if http1_wire::request_framing(fields) == Err(FramingError::LengthAndEncoding) {
                self.flags.conflicting_length.store(true, Ordering::Relaxed);
            }
            // The body as hyper reads it: chunked when that is the final coding, else the
            // length (none when it is invalid: hyper refuses the request and closes).
            self.state = match (fields.transfer_encoding, fields.content_length) {
                (Some(TransferCoding::Chunked), _) => {
                    Scan::Chunked(ChunkedDecoder::new(ChunkedLimits::UNBOUNDED))
                }
                (_, ContentLength::One(n) | ContentLength::Repeated(n)) if n > 0 => Scan::Fixed(n),
                _ => Scan::HEAD,
            };
            return;
        }
        if !std::mem::replace(first_line, false)
            && let Some(colon) = memchr::memchr(b':', text)
        {
            fields.observe(&text[..colon], text[colon + 1..].trim_ascii());
        }
    }
}

/// Skips up to `len` bytes of the `n` left; returns how many.
fn skip(n: &mut u64, len: usize) -> usize {
    let take = (*n).min(len as u64) as usize;
    *n -= take as u64;
    take
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
    /// `inner` scanned for heads with conflicting framing and heads over `max_head` bytes.
    pub fn new(inner: T, flags: Arc<Flags>, max_head: usize) -> Self {
        Self {
            inner,
            scanner: Scanner::new(flags, max_head),
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

    /// Feeds `input` in pieces of `step` bytes to a scanner whose heads may have `max_head`
    /// bytes; returns the flags.
    fn flags(input: &[u8], step: usize, max_head: usize) -> Arc<Flags> {
        let flags = Arc::new(Flags::default());
        let mut s = Scanner::new(flags.clone(), max_head);
        for chunk in input.chunks(step) {
            s.feed(chunk);
        }
        flags
    }

    /// Whether the conflicting-length flag was raised.
    fn scan(input: &[u8], step: usize) -> bool {
        flags(input, step, usize::MAX)
            .conflicting_length
            .load(Ordering::Relaxed)
    }

    #[test]
    fn flags_a_head_longer_than_the_limit_and_only_the_head_counts() {
        let head = |pad: usize| format!("GET / HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "p".repeat(pad));
        let max = head(0).len() + 100;
        let rows: [(String, bool); 5] = [
            (head(100), false),
            (head(101), true),
            // an incomplete head over the limit
            (head(200)[..max + 1].to_owned(), true),
            // bodies and several heads at the limit are not one long head
            (
                format!(
                    "POST / HTTP/1.1\r\nContent-Length: {m}\r\n\r\n{}",
                    "b".repeat(max * 2),
                    m = max * 2
                ),
                false,
            ),
            (format!("{}{}\r\n", head(100), head(100)), false),
        ];
        for (input, want) in rows {
            for step in [1, 7, input.len()] {
                let got = flags(input.as_bytes(), step, max)
                    .head_too_large
                    .load(Ordering::Relaxed);
                assert_eq!(got, want, "{input:?} in steps of {step}");
            }
        }
    }

    #[test]
    fn flags_content_length_with_transfer_encoding_in_either_order() {
        let rows: [(&[u8], bool); 11] = [
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
            // long header lines are followed whole, also when a read splits them
            (b"POST / HTTP/1.1\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nTransfer-Encoding: identity, identity, identity, identity, identity, identity, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n", true),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", false),
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
