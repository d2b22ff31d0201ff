//! The tar format of layers and archives: a deterministic ustar writer and a reader.
//!
//! The writer emits exactly what it is given, in the order given, with the mtime, owner and
//! mode the caller chose: no host metadata leaks into an entry, so equal inputs give equal
//! bytes. The reader yields entries for [`crate::store`] to check and unpack.

use std::io::{self, Read, Write};

const BLOCK: usize = 512;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File(Vec<u8>),
    Dir,
    /// A symbolic link to the path given.
    Symlink(String),
    /// A hard link to an earlier entry of the archive.
    Link(String),
}

/// One entry: its path (relative, `/`-separated, directories without a trailing slash), mode
/// bits and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub mode: u32,
    pub kind: Kind,
}

/// Why a tar stream could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the path {0:?} is too long for a ustar header")]
    PathTooLong(String),
    #[error("a header's checksum does not match (corrupt archive)")]
    Checksum,
    #[error("the entry {path:?} has type {kind:?}, which an image layer here may not hold")]
    Unsupported { path: String, kind: char },
    #[error("a header field is not an octal number")]
    Number,
    #[error("the archive ends inside an entry")]
    Truncated,
}

/// Writes `entries` as a ustar archive: uid/gid 0, owner names empty, every mtime `mtime`.
pub fn write(out: &mut impl Write, entries: &[Entry], mtime: u64) -> Result<(), TarError> {
    for entry in entries {
        let (typeflag, size, link) = match &entry.kind {
            Kind::File(data) => (b'0', data.len() as u64, ""),
            Kind::Dir => (b'5', 0, ""),
            Kind::Symlink(target) => (b'2', 0, target.as_str()),
            Kind::Link(target) => (b'1', 0, target.as_str()),
        };
        let name = match entry.kind {
            Kind::Dir => format!("{}/", entry.path),
            _ => entry.path.clone(),
        };
        let mut header = [0u8; BLOCK];
        let (prefix, name) = split_name(&name)?;
        header[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut header[100..108], u64::from(entry.mode & 0o7777));
        octal(&mut header[108..116], 0);
        octal(&mut header[116..124], 0);
        octal(&mut header[124..136], size);
        octal(&mut header[136..148], mtime);
        header[156] = typeflag;
        if link.len() > 100 {
            return Err(TarError::PathTooLong(link.to_owned()));
        }
        header[157..157 + link.len()].copy_from_slice(link.as_bytes());
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        let sum = checksum(&header);
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.write_all(&header)?;
        if let Kind::File(data) = &entry.kind {
            out.write_all(data)?;
            out.write_all(&[0u8; BLOCK][..padding(data.len())])?;
        }
    }
    out.write_all(&[0u8; 2 * BLOCK])?;
    Ok(())
}

/// Reads every entry of a ustar (or GNU/POSIX tar without extensions) archive.
pub fn read(input: &mut impl Read) -> Result<Vec<Entry>, TarError> {
    let mut entries = Vec::new();
    let mut header = [0u8; BLOCK];
    loop {
        if !read_block(input, &mut header)? || header.iter().all(|&b| b == 0) {
            return Ok(entries);
        }
        let stored = parse_octal(&header[148..156])?;
        if stored != checksum(&header) {
            return Err(TarError::Checksum);
        }
        let name = text(&header[..100]);
        let prefix = text(&header[345..500]);
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let mode = parse_octal(&header[100..108])? as u32;
        let size = parse_octal(&header[124..136])?;
        let link = text(&header[157..257]);
        let kind = match header[156] {
            b'0' | 0 => {
                let mut data = vec![0u8; size as usize];
                input
                    .read_exact(&mut data)
                    .map_err(|_| TarError::Truncated)?;
                let mut pad = [0u8; BLOCK];
                input
                    .read_exact(&mut pad[..padding(data.len())])
                    .map_err(|_| TarError::Truncated)?;
                Kind::File(data)
            }
            b'5' => Kind::Dir,
            b'2' => Kind::Symlink(link),
            b'1' => Kind::Link(link),
            other => {
                return Err(TarError::Unsupported {
                    path,
                    kind: other as char,
                });
            }
        };
        entries.push(Entry {
            path: path.trim_end_matches('/').to_owned(),
            mode,
            kind,
        });
    }
}

fn read_block(input: &mut impl Read, block: &mut [u8; BLOCK]) -> Result<bool, TarError> {
    let mut filled = 0;
    while filled < BLOCK {
        match input.read(&mut block[filled..])? {
            0 if filled == 0 => return Ok(false),
            0 => return Err(TarError::Truncated),
            n => filled += n,
        }
    }
    Ok(true)
}

/// ustar keeps names of up to 100 bytes, or a prefix of up to 155 and a name of up to 100
/// split at a `/`.
fn split_name(path: &str) -> Result<(&str, &str), TarError> {
    if path.len() <= 100 {
        return Ok(("", path));
    }
    let too_long = || TarError::PathTooLong(path.to_owned());
    let at = path[..path.len().min(156)]
        .rfind('/')
        .ok_or_else(too_long)?;
    let (prefix, name) = (&path[..at], &path[at + 1..]);
    if name.len() > 100 || name.is_empty() {
        return Err(too_long());
    }
    Ok((prefix, name))
}

fn padding(len: usize) -> usize {
    (BLOCK - len % BLOCK) % BLOCK
}

fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    field[digits] = 0;
}

fn parse_octal(field: &[u8]) -> Result<u64, TarError> {
    let text = std::str::from_utf8(field).map_err(|_| TarError::Number)?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|_| TarError::Number)
}

/// The header's checksum: every byte summed, the checksum field counted as spaces.
fn checksum(header: &[u8; BLOCK]) -> u64 {
    header
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(b)
            }
        })
        .sum()
}

fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_round_trip() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let entries = vec![
            Entry {
                path: "etc".into(),
                mode: 0o755,
                kind: Kind::Dir,
            },
            Entry {
                path: "etc/passwd".into(),
                mode: 0o644,
                kind: Kind::File(b"root:x:0:0::/:\n".to_vec()),
            },
            Entry {
                path: "empty".into(),
                mode: 0o600,
                kind: Kind::File(Vec::new()),
            },
            Entry {
                path: "link".into(),
                mode: 0o777,
                kind: Kind::Symlink("etc/passwd".into()),
            },
            Entry {
                path: "hard".into(),
                mode: 0o644,
                kind: Kind::Link("etc/passwd".into()),
            },
            Entry {
                path: long,
                mode: 0o755,
                kind: Kind::File(vec![7u8; 1000]),
            },
        ];
        let mut bytes = Vec::new();
        write(&mut bytes, &entries, 1_700_000_000).unwrap();
        assert_eq!(bytes.len() % BLOCK, 0);
        assert_eq!(read(&mut bytes.as_slice()).unwrap(), entries);
    }

    #[test]
    fn a_corrupt_header_is_refused() {
        let entries = vec![Entry {
            path: "a".into(),
            mode: 0o644,
            kind: Kind::File(b"x".to_vec()),
        }];
        let mut bytes = Vec::new();
        write(&mut bytes, &entries, 0).unwrap();
        bytes[0] = b'b';
        assert!(matches!(
            read(&mut bytes.as_slice()),
            Err(TarError::Checksum)
        ));
    }

    #[test]
    fn device_nodes_are_refused() {
        let entries = vec![Entry {
            path: "dev/x".into(),
            mode: 0o644,
            kind: Kind::Dir,
        }];
        let mut bytes = Vec::new();
        write(&mut bytes, &entries, 0).unwrap();
        bytes[156] = b'3';
        let sum = checksum(bytes[..BLOCK].try_into().unwrap());
        bytes[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let err = read(&mut bytes.as_slice()).unwrap_err();
        assert!(
            matches!(err, TarError::Unsupported { kind: '3', .. }),
            "{err}"
        );
    }
}
