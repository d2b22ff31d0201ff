use super::*;

const BODY: &[u8] = b"5;ext=1\r\nhello\r\n0000a\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nNEXT";

/// Decodes `input` fed in pieces of `step` bytes: the data, and where the body ended.
fn decode_in_steps(
    input: &[u8],
    step: usize,
    limits: ChunkedLimits,
) -> Result<(Vec<u8>, Option<usize>), ChunkedError> {
    let mut d = ChunkedDecoder::new(limits);
    let mut data = Vec::new();
    let mut offset = 0;
    for piece in input.chunks(step) {
        let mut at = 0;
        loop {
            match d.decode(&piece[at..])? {
                Step::Data { framing, data: n } => {
                    data.extend_from_slice(&piece[at + framing..at + framing + n]);
                    at += framing + n;
                }
                Step::End { framing } => return Ok((data, Some(offset + at + framing))),
                Step::NeedMore => break,
            }
        }
        offset += piece.len();
    }
    Ok((data, None))
}

#[test]
fn rfc9112_7_1_the_data_is_the_chunks_in_order_however_the_bytes_arrive() {
    for step in 1..=BODY.len() {
        let (data, end) = decode_in_steps(BODY, step, ChunkedLimits::default()).unwrap();
        assert_eq!(data, b"hello0123456789", "in steps of {step}");
        assert_eq!(end, Some(BODY.len() - 4), "in steps of {step}");
    }
}

#[test]
fn rfc9112_7_1_the_last_chunk_has_size_zero_and_ends_the_body_after_the_trailer_section() {
    assert_eq!(ChunkedDecoder::default().feed(b"0\r\n\r\n"), Ok(Some(5)));
    assert_eq!(
        ChunkedDecoder::default().feed(b"000\r\nA: b\r\nC: d\r\n\r\nX"),
        Ok(Some(19))
    );
    let mut d = ChunkedDecoder::default();
    assert_eq!(d.feed(b"0\r\n\r"), Ok(None));
    assert!(!d.is_done());
    assert_eq!(d.feed(b"\nX"), Ok(Some(1)));
    assert!(d.is_done());
    assert_eq!(
        d.feed(b"more"),
        Ok(Some(0)),
        "a finished body takes nothing more"
    );
}

#[test]
fn feeding_finds_the_end_split_anywhere() {
    let end = BODY.len() - 4;
    assert_eq!(ChunkedDecoder::default().feed(BODY), Ok(Some(end)));
    for split in 1..BODY.len() {
        let mut c = ChunkedDecoder::default();
        let got = match c.feed(&BODY[..split]).unwrap() {
            Some(n) => n,
            None => {
                split
                    + c.feed(&BODY[split..])
                        .unwrap()
                        .expect("ends in the second piece")
            }
        };
        assert_eq!(got, end, "split at {split}");
    }
    let mut c = ChunkedDecoder::default();
    let mut ended = None;
    for (i, b) in BODY.iter().enumerate() {
        if let Some(n) = c.feed(std::slice::from_ref(b)).unwrap() {
            ended = Some(i + n);
            break;
        }
    }
    assert_eq!(ended, Some(end));
}

#[test]
fn rfc9112_7_1_1_chunk_extensions_are_ignored() {
    let (data, end) = decode_in_steps(
        b"3 ; a=b;c=\"d\"\r\nabc\r\n2\t\r\nde\r\n0;last\r\n\r\n",
        1,
        ChunkedLimits::default(),
    )
    .unwrap();
    assert_eq!((data.as_slice(), end.is_some()), (&b"abcde"[..], true));
}

#[test]
fn broken_chunked_framing_is_an_error() {
    use ChunkedError::*;
    let rows: &[(&[u8], ChunkedError)] = &[
        (b"x\r\n", MissingSize),
        (b"\r\n", MissingSize),
        (b" 5\r\n", MissingSize),
        (b"zz\r\nhello\r\n0\r\n\r\n", MissingSize),
        (b"5x\r\n", InvalidSize),
        (b"5\nhello", InvalidSize),
        (b"5;ext\nhello", BareLf),
        (b"5\r\r", SizeLf),
        (b"5\r\nhelloX\r\n", DataCrlf),
        (b"2\r\nhello\r\n0\r\n\r\n", DataCrlf),
        (b"5\r\nhello\rX", DataCrlf),
        (b"1000000000000000\r\n", SizeTooLarge),
        (b"ffffffffffffffffff\r\n", SizeTooLarge),
        (b"0\r\nX: y\rZ", TrailerLf),
        (b"0\r\n\rZ", TrailerLf),
    ];
    for (bad, want) in rows {
        for step in [1, 2, bad.len()] {
            assert_eq!(
                decode_in_steps(bad, step, ChunkedLimits::default()).map(|_| ()),
                Err(*want),
                "{:?} in steps of {step}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

#[test]
fn the_size_line_and_the_trailer_section_are_bounded() {
    let limits = ChunkedLimits {
        max_size_line: 8,
        max_trailers: 10,
    };
    assert!(decode_in_steps(b"5;abcdef\r\nhello\r\n0\r\n\r\n", 1, limits).is_ok());
    assert_eq!(
        decode_in_steps(b"5;abcdefg\r\n", 1, limits).map(|_| ()),
        Err(ChunkedError::SizeLineTooLong)
    );
    assert!(decode_in_steps(b"0\r\nA: bcd\r\n\r\n", 1, limits).is_ok());
    assert_eq!(
        decode_in_steps(b"0\r\nA: bcde\r\n\r\n", 1, limits).map(|_| ()),
        Err(ChunkedError::TrailersTooLarge)
    );
    let long = [b"5;".as_slice(), &[b'x'; 5000], b"\r\nhello\r\n0\r\n\r\n"].concat();
    assert!(decode_in_steps(&long, 7, ChunkedLimits::UNBOUNDED).is_ok());
}

#[test]
fn a_large_chunk_is_given_as_it_arrives_without_buffering() {
    let mut d = ChunkedDecoder::default();
    assert_eq!(
        d.decode(b"ffff\r\nab"),
        Ok(Step::Data {
            framing: 6,
            data: 2
        })
    );
    assert_eq!(
        d.decode(b"cd"),
        Ok(Step::Data {
            framing: 0,
            data: 2
        })
    );
    assert_eq!(d.decode(b""), Ok(Step::NeedMore));
}
