//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally: input in any pieces,
//! a byte at a time if need be, with nothing buffered. The decoder says which bytes of each
//! piece are framing and which are chunk data; a caller that passes the body through unchanged
//! only asks where it ends ([`ChunkedDecoder::feed`]).
//!
//! Accepted: hexadecimal sizes of up to 15 digits, whitespace or `;` after the size and then
//! anything up to CR (chunk extensions are ignored), trailer lines ended by CRLF. Refused: a
//! missing or non-hexadecimal size, a bare LF after a size or in an extension, chunk data not
//! followed by CRLF, a trailer line not ended by CRLF, and a size line or trailer section
//! longer than its [`ChunkedLimits`].

/// Bounds on the parts of a chunked body that are not data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedLimits {
    /// Bytes of one chunk-size line (size and extensions, without the CRLF).
    pub max_size_line: usize,
    /// Bytes of the trailer section (its lines and CRLFs, the final empty line included).
    pub max_trailers: usize,
}

impl Default for ChunkedLimits {
    /// 1 KiB per size line, 64 KiB of trailers.
    fn default() -> Self {
        Self {
            max_size_line: 1024,
            max_trailers: 64 * 1024,
        }
    }
}

impl ChunkedLimits {
    /// No bounds: for a decoder that only watches bytes another parser reads (and bounds).
    pub const UNBOUNDED: Self = Self {
        max_size_line: usize::MAX,
        max_trailers: usize::MAX,
    };
}

/// A chunked body that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("invalid chunked encoding: missing chunk size")]
    MissingSize,
    #[error("invalid chunked encoding: invalid chunk size")]
    InvalidSize,
    #[error("invalid chunked encoding: chunk size too large")]
    SizeTooLarge,
    #[error("invalid chunked encoding: chunk size line too long")]
    SizeLineTooLong,
    #[error("invalid chunked encoding: bare LF in chunk extension")]
    BareLf,
    #[error("invalid chunked encoding: expected LF after chunk size")]
    SizeLf,
    #[error("invalid chunked encoding: expected CRLF after chunk data")]
    DataCrlf,
    #[error("invalid chunked encoding: expected LF after a trailer field")]
    TrailerLf,
    #[error("invalid chunked encoding: trailer section too large")]
    TrailersTooLarge,
}

/// What the start of the input holds, after [`ChunkedDecoder::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `framing` bytes of framing, then `data` bytes of chunk data (at least one): the caller
    /// consumes `framing + data` bytes and decodes the rest.
    Data { framing: usize, data: usize },
    /// The body ends after `framing` more bytes (the last chunk and trailer section); what
    /// follows them is the next message.
    End { framing: usize },
    /// All of the input was framing (or there was none): more is needed.
    NeedMore,
}

/// The state of one chunked body.
#[derive(Debug, Clone, Copy)]
pub struct ChunkedDecoder {
    state: State,
    /// The size being read, then the data left of the current chunk.
    size: u64,
    digits: u8,
    /// Bytes of the current size line, or of the trailer section.
    seen: usize,
    limits: ChunkedLimits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    /// After the size: whitespace and extensions up to CR.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new(ChunkedLimits::default())
    }
}

impl ChunkedDecoder {
    pub fn new(limits: ChunkedLimits) -> Self {
        Self {
            state: State::Size,
            size: 0,
            digits: 0,
            seen: 0,
            limits,
        }
    }

    /// The whole body, last chunk and trailers included, has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads framing from the start of `input` up to the next chunk data or the end of the
    /// body.
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ChunkedError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                State::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits == 15 {
                            return Err(ChunkedError::SizeTooLarge);
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                        self.count_size_line()?;
                    }
                    None if self.digits == 0 => return Err(ChunkedError::MissingSize),
                    None if b == b'\r' => self.state = State::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => {
                        self.count_size_line()?;
                        self.state = State::Extension;
                    }
                    None => return Err(ChunkedError::InvalidSize),
                },
                State::Extension => match b {
                    b'\r' => self.state = State::SizeLf,
                    b'\n' => return Err(ChunkedError::BareLf),
                    _ => self.count_size_line()?,
                },
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::SizeLf);
                    }
                    self.digits = 0;
                    self.seen = 0;
                    self.state = if self.size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data
                    };
                }
                State::Data => {
                    let data =
                        (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    self.size -= data as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                    return Ok(Step::Data { framing: i, data });
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkedError::DataCrlf);
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::DataCrlf);
                    }
                    self.state = State::Size;
                }
                State::TrailerStart => {
                    self.count_trailers()?;
                    self.state = if b == b'\r' {
                        State::EndLf
                    } else {
                        State::Trailer
                    };
                }
                State::Trailer => {
                    self.count_trailers()?;
                    if b == b'\r' {
                        self.state = State::TrailerLf;
                    }
                }
                State::TrailerLf => {
                    self.count_trailers()?;
                    if b != b'\n' {
                        return Err(ChunkedError::TrailerLf);
                    }
                    self.state = State::TrailerStart;
                }
                State::EndLf => {
                    self.count_trailers()?;
                    if b != b'\n' {
                        return Err(ChunkedError::TrailerLf);
                    }
                    self.state = State::Done;
                    return Ok(Step::End { framing: i + 1 });
                }
                State::Done => return Ok(Step::End { framing: i }),
            }
            i += 1;
        }
        Ok(if self.state == State::Done {
            Step::End { framing: 0 }
        } else {
            Step::NeedMore
        })
    }

    /// Consumes `input` of a body passed through unchanged: `Some(n)` when the body ends after
    /// its first `n` bytes.
    pub fn feed(&mut self, input: &[u8]) -> Result<Option<usize>, ChunkedError> {
        let mut at = 0;
        loop {
            match self.decode(&input[at..])? {
                Step::Data { framing, data } => at += framing + data,
                Step::End { framing } => return Ok(Some(at + framing)),
                Step::NeedMore => return Ok(None),
            }
        }
    }

    fn count_size_line(&mut self) -> Result<(), ChunkedError> {
        self.seen += 1;
        if self.seen > self.limits.max_size_line {
            return Err(ChunkedError::SizeLineTooLong);
        }
        Ok(())
    }

    fn count_trailers(&mut self) -> Result<(), ChunkedError> {
        self.seen += 1;
        if self.seen > self.limits.max_trailers {
            return Err(ChunkedError::TrailersTooLarge);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
