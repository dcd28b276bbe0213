#![allow(clippy::unwrap_used)]
use super::*;

fn reopen(path: &Path) -> Vec<Vec<u8>> {
    Journal::open(path).unwrap().1
}

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
    let end = j.end;
    drop(j);
    // A crash mid-write: the head of a record whose payload never reached the disk.
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    let mut head = Vec::new();
    head.extend_from_slice(&9u32.to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    head.extend_from_slice(&1u64.to_le_bytes());
    f.write_all_at(&head, end).unwrap();
    drop(f);
    let (j, recs) = Journal::open(&path).unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(j.end, end, "the next record overwrites the torn one");
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
    let second = j.end;
    j.append(b"second").unwrap();
    drop(j);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[second as usize + RECORD_HEAD + 2] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let (mut j, recs) = Journal::open(&path).unwrap();
    assert_eq!(recs, vec![b"first".to_vec()]);
    j.append(b"third").unwrap();
    drop(j);
    assert_eq!(reopen(&path), vec![b"first".to_vec(), b"third".to_vec()]);
}

#[test]
fn the_file_keeps_its_size_and_a_reset_hides_the_old_generation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let (mut j, _) = Journal::open(&path).unwrap();
    for i in 0..100u32 {
        j.append(&i.to_le_bytes().repeat(100)).unwrap();
    }
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, GROW, "grown once, zero-filled");
    j.reset().unwrap();
    assert!(j.is_empty());
    j.append(b"new").unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        size,
        "written in place"
    );
    drop(j);
    // The old generation's records after the new one are not replayed.
    assert_eq!(reopen(&path), vec![b"new".to_vec()]);
    // Reset with nothing written since: nothing replays.
    let (mut j, _) = Journal::open(&path).unwrap();
    j.reset().unwrap();
    drop(j);
    assert!(reopen(&path).is_empty());
}

#[test]
fn a_torn_header_slot_falls_back_to_the_other_and_two_refuse_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let (mut j, _) = Journal::open(&path).unwrap();
    j.append(b"one").unwrap();
    drop(j);
    // A crash while a reset wrote generation 2 into slot 0: generation 1 is current
    // still, and its record (checkpointed before the reset) replays harmlessly.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8] = 2;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(reopen(&path), vec![b"one".to_vec()]);
    // Both slots unreadable: refuse rather than guess.
    bytes[SLOT as usize + 10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    assert!(Journal::open(&path).is_err());
}

#[test]
fn records_newer_than_every_whole_slot_refuse_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let (mut j, _) = Journal::open(&path).unwrap();
    j.append(b"one").unwrap();
    j.reset().unwrap(); // generation 2, in slot 0
    j.append(b"two").unwrap();
    drop(j);
    // Slot 0 damaged later: generation 1 would replay and "two" be lost.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    assert!(Journal::open(&path).is_err());
}

#[test]
fn a_journal_of_the_old_format_is_replayed_then_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    let mut old = Vec::new();
    for payload in [&b"a"[..], b"bc"] {
        old.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        old.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        old.extend_from_slice(payload);
    }
    old.extend_from_slice(&[7, 0, 0]); // a torn tail
    std::fs::write(&path, &old).unwrap();
    let (mut j, recs) = Journal::open(&path).unwrap();
    assert_eq!(recs, vec![b"a".to_vec(), b"bc".to_vec()]);
    assert!(j.append(b"x").is_err(), "replayed and reset first");
    j.reset().unwrap();
    j.append(b"x").unwrap();
    drop(j);
    assert_eq!(reopen(&path), vec![b"x".to_vec()]);
}

#[test]
fn malformed_changes_are_refused_not_guessed() {
    assert!(changes(&[1]).is_none());
    assert!(changes(&[1, 7, 0, 0, 0, 0]).is_none());
    assert!(changes(&[1, 1, 5, 0, 0, 0, b'a']).is_none());
}

#[test]
fn a_zero_filled_journal_without_a_header_is_empty() {
    // A first start that grew the file and stopped before writing its header slot.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j");
    std::fs::write(&path, vec![0u8; GROW as usize]).unwrap();
    let (mut j, recs) = Journal::open(&path).unwrap();
    assert!(recs.is_empty(), "zeros are not a journal of empty records");
    j.append(b"x").unwrap();
    drop(j);
    assert_eq!(reopen(&path), vec![b"x".to_vec()]);
}
