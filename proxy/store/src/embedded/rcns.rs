//! RCNS records in the embedded store (`store::rcns`), in one table by a tag byte:
//!
//! ```text
//! 'r' · kind · key                         → record (`store::rcns::Stored`, JSON)
//! 'o' · kind · len(owner) · owner · key    → ()        an agent's records
//! 'd' · expiry (u64 BE) · kind · key       → ()        expiry order, for the sweep
//! 'n' · kind                               → count (u64 BE) of stored records
//! ```

use redb::{ReadTransaction, ReadableTable};

use crate::rcns::Stored;
use crate::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, StoreError};

use super::tables::{unavailable, Tables, RCNS, T_RCNS};

fn record_key(kind: RcnsKind, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 2);
    k.extend_from_slice(&[b'r', kind.tag()]);
    k.extend_from_slice(key.as_bytes());
    k
}

fn owner_prefix(kind: RcnsKind, owner: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(owner.len() + 3);
    k.extend_from_slice(&[
        b'o',
        kind.tag(),
        u8::try_from(owner.len()).unwrap_or(u8::MAX),
    ]);
    k.extend_from_slice(owner.as_bytes());
    k
}

fn due_key(exp: i64, kind: RcnsKind, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 10);
    k.push(b'd');
    k.extend_from_slice(&u64::try_from(exp).unwrap_or(0).to_be_bytes());
    k.push(kind.tag());
    k.extend_from_slice(key.as_bytes());
    k
}

fn put(t: &mut Tables<'_>, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
    t.rcns.insert(key, value).map_err(unavailable)?;
    t.redo.put(T_RCNS, key, value);
    Ok(())
}

fn delete(t: &mut Tables<'_>, key: &[u8]) -> Result<(), StoreError> {
    t.rcns.remove(key).map_err(unavailable)?;
    t.redo.delete(T_RCNS, key);
    Ok(())
}

fn parse(bytes: &[u8]) -> Result<Stored, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| unavailable("an RCNS record cannot be read"))
}

fn count(t: &Tables<'_>, kind: RcnsKind) -> Result<u64, StoreError> {
    Ok(t.rcns
        .get([b'n', kind.tag()].as_slice())
        .map_err(unavailable)?
        .and_then(|v| <[u8; 8]>::try_from(v.value()).ok().map(u64::from_be_bytes))
        .unwrap_or(0))
}

fn add(t: &mut Tables<'_>, kind: RcnsKind, delta: i64) -> Result<(), StoreError> {
    let n = count(t, kind)?.saturating_add_signed(delta);
    put(t, &[b'n', kind.tag()], &n.to_be_bytes())
}

fn remove(t: &mut Tables<'_>, kind: RcnsKind, key: &str) -> Result<(), StoreError> {
    let rk = record_key(kind, key);
    let old = match t.rcns.get(rk.as_slice()).map_err(unavailable)? {
        Some(v) => parse(v.value())?,
        None => return Ok(()),
    };
    delete(t, &rk)?;
    let mut ok = owner_prefix(kind, &old.owner);
    ok.extend_from_slice(key.as_bytes());
    delete(t, &ok)?;
    delete(t, &due_key(old.exp, kind, key))?;
    add(t, kind, -1)
}

/// `owner`'s unexpired records of `kind`, counted up to `cap`.
fn live_of(
    t: &Tables<'_>,
    kind: RcnsKind,
    owner: &str,
    cap: u64,
    now: i64,
) -> Result<u64, StoreError> {
    let prefix = owner_prefix(kind, owner);
    let mut end = prefix.clone();
    end.push(0xff);
    let mut live = 0;
    for row in t
        .rcns
        .range::<&[u8]>(prefix.as_slice()..end.as_slice())
        .map_err(unavailable)?
    {
        let (k, _) = row.map_err(unavailable)?;
        let key = String::from_utf8_lossy(k.value().get(prefix.len()..).unwrap_or_default());
        let rec = t
            .rcns
            .get(record_key(kind, &key).as_slice())
            .map_err(unavailable)?;
        if let Some(v) = rec {
            if parse(v.value())?.exp > now {
                live += 1;
                if live >= cap {
                    break;
                }
            }
        }
    }
    Ok(live)
}

/// Inside the writer's transaction.
pub(super) fn store(
    t: &mut Tables<'_>,
    r: &RcnsRecord,
    mode: RcnsPutMode,
) -> Result<RcnsPut, StoreError> {
    let now = t.now_ms;
    let rk = record_key(r.kind, &r.key);
    let existing = match t.rcns.get(rk.as_slice()).map_err(unavailable)? {
        Some(v) => Some(parse(v.value())?),
        None => None,
    };
    if mode == RcnsPutMode::Touch {
        let Some(mut old) = existing.filter(|o| o.exp > now) else {
            return Ok(RcnsPut::Missing);
        };
        delete(t, &due_key(old.exp, r.kind, &r.key))?;
        old.exp = r.expires_ms;
        let bytes = serde_json::to_vec(&old).map_err(unavailable)?;
        put(t, &rk, &bytes)?;
        put(t, &due_key(old.exp, r.kind, &r.key), &[])?;
        return Ok(RcnsPut::Stored);
    }
    if let RcnsPutMode::Create { per_owner, total } = mode {
        match existing {
            Some(old) if old.exp > now => {
                return Ok(RcnsPut::Exists(Box::new(old.record(r.kind, r.key.clone()))));
            }
            // Expired, not yet swept: it goes now, and frees its place under the caps.
            Some(_) => remove(t, r.kind, &r.key)?,
            None => {}
        }
        if live_of(t, r.kind, &r.owner, per_owner, now)? >= per_owner {
            return Ok(RcnsPut::OwnerFull);
        }
        // The total counts records until they are swept (the sweep keeps pace with writes).
        if count(t, r.kind)? >= total {
            return Ok(RcnsPut::Full);
        }
    }
    remove(t, r.kind, &r.key)?;
    let bytes = serde_json::to_vec(&Stored::of(r)).map_err(unavailable)?;
    put(t, &rk, &bytes)?;
    let mut ok = owner_prefix(r.kind, &r.owner);
    ok.extend_from_slice(r.key.as_bytes());
    put(t, &ok, &[])?;
    put(t, &due_key(r.expires_ms, r.kind, &r.key), &[])?;
    add(t, r.kind, 1)?;
    Ok(RcnsPut::Stored)
}

pub(super) fn get(
    rtx: &ReadTransaction,
    kind: RcnsKind,
    key: &str,
    now: i64,
) -> Result<Option<RcnsRecord>, StoreError> {
    let table = rtx.open_table(RCNS).map_err(unavailable)?;
    let v = table
        .get(record_key(kind, key).as_slice())
        .map_err(unavailable)?;
    match v {
        Some(v) => {
            let s = parse(v.value())?;
            Ok((s.exp > now).then(|| s.record(kind, key.to_owned())))
        }
        None => Ok(None),
    }
}

pub(super) fn list(
    rtx: &ReadTransaction,
    kind: RcnsKind,
    owner: Option<&str>,
    limit: usize,
    now: i64,
) -> Result<Vec<RcnsRecord>, StoreError> {
    let table = rtx.open_table(RCNS).map_err(unavailable)?;
    let mut out = Vec::new();
    let (prefix, skip) = match owner {
        Some(o) => {
            let p = owner_prefix(kind, o);
            let n = p.len();
            (p, n)
        }
        None => (vec![b'r', kind.tag()], 2),
    };
    let mut end = prefix.clone();
    end.push(0xff);
    for row in table
        .range::<&[u8]>(prefix.as_slice()..end.as_slice())
        .map_err(unavailable)?
    {
        if out.len() >= limit {
            break;
        }
        let (k, v) = row.map_err(unavailable)?;
        let key = String::from_utf8_lossy(k.value().get(skip..).unwrap_or_default()).into_owned();
        let stored = if owner.is_some() {
            match table
                .get(record_key(kind, &key).as_slice())
                .map_err(unavailable)?
            {
                Some(v) => parse(v.value())?,
                None => continue,
            }
        } else {
            parse(v.value())?
        };
        if stored.exp > now {
            out.push(stored.record(kind, key));
        }
    }
    Ok(out)
}

/// Removes up to `limit` expired records, oldest expiry first.
pub(super) fn sweep(t: &mut Tables<'_>, now: u64, limit: usize) -> Result<(), StoreError> {
    let mut end = vec![b'd'];
    end.extend_from_slice(&now.to_be_bytes());
    let due: Vec<Vec<u8>> = t
        .rcns
        .range::<&[u8]>([b'd'].as_slice()..end.as_slice())
        .map_err(unavailable)?
        .take(limit)
        .map(|row| row.map(|(k, _)| k.value().to_vec()).map_err(unavailable))
        .collect::<Result<_, _>>()?;
    for k in due {
        let kind = k.get(9).copied().and_then(RcnsKind::of_tag);
        let key = String::from_utf8_lossy(k.get(10..).unwrap_or_default()).into_owned();
        match kind {
            Some(kind) => remove(t, kind, &key)?,
            None => delete(t, &k)?,
        }
    }
    Ok(())
}
