//! The embedded store's redo journal: what makes a commit durable with one sequential append.
//!
//! Why: a durable redb commit writes every B-tree page it touched, scattered over the file,
//! then fsyncs. The write path's keys (resources, lease ids) are random, so a batch of a dozen
//! writes touches ~20 pages, and on this machine 20 scattered page writes + fdatasync take
//! ~1.8 ms where an 8 KiB append + fdatasync takes ~0.4 ms. So a batch is durable once its
//! changes, as physical key/value puts and deletes, were appended here and fsync'd; redb
//! gets them in a *non-durable* commit shared by several batches (readers see the batches in
//! between through the embedded store's overlay). Every so often (and on a clean stop) a
//! durable redb commit checkpoints everything and the journal is emptied.
//!
//! Recovery on open: replay every whole record in order (puts and deletes are idempotent, so
//! a record that the last checkpoint already holds replays harmlessly), checkpoint, empty.
//! A torn tail (a crash mid-append) fails its length or CRC check and is dropped: that batch
//! was never answered, because answers go out only after the append's fsync.
//!
//! Record: `len: u32 LE · crc32(payload): u32 LE · payload`.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// Largest record accepted on replay: bounded so a corrupt length cannot ask for gigabytes.
const MAX_RECORD: u32 = 256 << 20;

pub struct Journal {
    file: File,
    path: PathBuf,
    len: u64,
}

impl Journal {
    /// Opens (or creates) the journal at `path` and returns it with the payloads of its whole
    /// records, oldest first. A torn or corrupt tail is cut off.
    pub fn open(path: &Path) -> std::io::Result<(Journal, Vec<Vec<u8>>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut records = Vec::new();
        let mut at = 0usize;
        while let Some(head) = bytes.get(at..at + 8) {
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if len > MAX_RECORD {
                break;
            }
            let Some(payload) = bytes.get(at + 8..at + 8 + len as usize) else {
                break;
            };
            if crc32fast::hash(payload) != crc {
                break;
            }
            records.push(payload.to_vec());
            at += 8 + len as usize;
        }
        if at < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                dropped_bytes = bytes.len() - at,
                "store journal: dropping a torn tail (a batch that was never acknowledged)"
            );
            file.set_len(at as u64)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::Start(at as u64))?;
        Ok((
            Journal {
                file,
                path: path.to_owned(),
                len: at as u64,
            },
            records,
        ))
    }

    /// Appends one record and makes it durable. On failure the journal is cut back to where
    /// it was, so a half-written record never sits before a later whole one.
    pub fn append(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|l| *l <= MAX_RECORD)
            .ok_or_else(|| std::io::Error::other("journal record too large"))?;
        let mut buf = Vec::with_capacity(payload.len() + 8);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        buf.extend_from_slice(payload);
        let written = self
            .file
            .write_all(&buf)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = self.file.seek(SeekFrom::Start(self.len));
                Err(e)
            }
        }
    }

    /// Empties the journal (after a checkpoint made its records durable in the database).
    pub fn reset(&mut self) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.sync_all()?;
        self.len = 0;
        Ok(())
    }

    /// Bytes of records not yet checkpointed.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes the (empty) journal file: at rest, after a clean stop, the store is one file.
    pub fn remove(self) -> std::io::Result<()> {
        if self.len == 0 {
            std::fs::remove_file(&self.path)?;
        }
        Ok(())
    }
}

/// The physical changes of one batch, in order, as the journal stores them:
/// `table: u8 · op: u8 (1 put, 0 delete) · klen: u32 LE · key · [vlen: u32 LE · value]`.
#[derive(Default)]
pub struct Redo {
    pub bytes: Vec<u8>,
}

/// One change read back from a record.
pub struct Change<'a> {
    pub table: u8,
    pub key: &'a [u8],
    /// `None`: delete.
    pub value: Option<&'a [u8]>,
}

impl Redo {
    pub fn put(&mut self, table: u8, key: &[u8], value: &[u8]) {
        self.bytes.push(table);
        self.bytes.push(1);
        self.bytes
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(key);
        self.bytes
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(value);
    }

    pub fn delete(&mut self, table: u8, key: &[u8]) {
        self.bytes.push(table);
        self.bytes.push(0);
        self.bytes
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(key);
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Reads the changes of one record; `None` if it is malformed (it passed its CRC, so only a
/// bug could make it so: recovery stops rather than guess).
pub fn changes(payload: &[u8]) -> Option<Vec<Change<'_>>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    fn len(b: &mut &[u8]) -> Option<usize> {
        let l = take(b, 4)?;
        Some(u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)
    }
    let mut b = payload;
    let mut out = Vec::new();
    while !b.is_empty() {
        let head = take(&mut b, 2)?;
        let (table, op) = (head[0], head[1]);
        let klen = len(&mut b)?;
        let key = take(&mut b, klen)?;
        let value = match op {
            1 => {
                let vlen = len(&mut b)?;
                Some(take(&mut b, vlen)?)
            }
            0 => None,
            _ => return None,
        };
        out.push(Change { table, key, value });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, recs) = Journal::open(&path).unwrap();
        assert!(recs.is_empty());
        let mut r = Redo::default();
        r.put(1, b"k", b"v");
        r.delete(2, b"gone");
        j.append(&r.bytes).unwrap();
        j.append(b"").unwrap();
        let whole = j.len();
        drop(j);
        // A crash mid-append: half a record at the end.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (j, recs) = Journal::open(&path).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(j.len(), whole, "the torn tail is cut off");
        let c = changes(&recs[0]).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].table, c[0].key, c[0].value),
            (1, &b"k"[..], Some(&b"v"[..]))
        );
        assert_eq!((c[1].table, c[1].key, c[1].value), (2, &b"gone"[..], None));
        assert!(changes(&recs[1]).unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_record_ends_replay_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, _) = Journal::open(&path).unwrap();
        j.append(b"first").unwrap();
        j.append(b"second").unwrap();
        drop(j);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (mut j, recs) = Journal::open(&path).unwrap();
        assert_eq!(recs, vec![b"first".to_vec()]);
        j.append(b"third").unwrap();
        drop(j);
        let (_, recs) = Journal::open(&path).unwrap();
        assert_eq!(recs, vec![b"first".to_vec(), b"third".to_vec()]);
    }

    #[test]
    fn malformed_changes_are_refused_not_guessed() {
        assert!(changes(&[1]).is_none());
        assert!(changes(&[1, 7, 0, 0, 0, 0]).is_none());
        assert!(changes(&[1, 1, 5, 0, 0, 0, b'a']).is_none());
    }
}
