//! What RICH admission (SPEC §13) keeps between requests: the issuers' keys (swapped whole
//! when a JWKS file changes), the rules every token is held to, and the tokens already
//! verified, by digest.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use palisade_policy::digest::Sha256Digest;
use palisade_rich::admission::{Grant, Keys, Rules, Verified};

use crate::config::Admission;

/// Tokens kept verified at most; past it the cache starts again (a flood of distinct tokens
/// costs verifications, never memory).
pub const CACHE_ENTRIES: usize = 10_000;

/// How long an introspection's refusal of a token is remembered.
pub const REFUSED_FOR_S: u64 = 30;

/// A verified token and what it grants.
pub struct Admitted {
    pub token: Verified,
    pub grants: Vec<Grant>,
}

/// An issuer's `jwks_uri` (SPEC §13): the last document fetched from it that read as keys,
/// kept in use while the issuer is unreachable.
pub struct UrlKeys {
    pub url: String,
    pub doc: Mutex<Option<Vec<u8>>>,
    /// When it was last fetched, whatever came of it: an unknown `kid` fetches again only
    /// `jwks_refresh.min` after.
    pub last: Mutex<Option<tokio::time::Instant>>,
    /// One fetch at a time: who waits for it then finds it recent and does not fetch again.
    pub fetching: tokio::sync::Mutex<()>,
}

pub struct AdmissionState {
    pub config: Admission,
    pub rules: Rules,
    pub keys: arc_swap::ArcSwap<Keys>,
    /// The issuers' JWKS URLs, in `admission.jwks` order.
    pub urls: Vec<UrlKeys>,
    /// Opaque tokens introspection refused, by digest, until when (Unix seconds): a token
    /// sent again and again is asked about once per [`REFUSED_FOR_S`], not on every call.
    refused: Mutex<HashMap<Sha256Digest, (u64, palisade_policy::Refusal)>>,
    /// Verified tokens by digest, with the key generation they were verified under: a key
    /// rotation drops them all.
    cache: Mutex<(u64, HashMap<Sha256Digest, Arc<Admitted>>)>,
    generation: std::sync::atomic::AtomicU64,
}

impl AdmissionState {
    /// Reads the JWKS files `config` names; `Err` lists every problem.
    pub fn load(config: &Admission) -> Result<Self, Vec<String>> {
        let keys = load_keys(&config.jwks)?;
        let algorithms = config
            .algorithms
            .iter()
            .filter_map(|a| palisade_rich::admission::token::algorithm(a))
            .collect();
        Ok(Self {
            rules: Rules {
                issuers: config.issuers.clone(),
                audience: config.resource.clone(),
                algorithms,
                skew_s: config.max_clock_skew.as_secs(),
            },
            config: config.clone(),
            keys: arc_swap::ArcSwap::from_pointee(keys),
            urls: config
                .jwks_urls
                .iter()
                .map(|url| UrlKeys {
                    url: url.clone(),
                    doc: Mutex::new(None),
                    last: Mutex::new(None),
                    fetching: tokio::sync::Mutex::new(()),
                })
                .collect(),
            refused: Mutex::new(HashMap::new()),
            cache: Mutex::new((0, HashMap::new())),
            generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The keys of the JWKS files as they are now and of the URLs' last good documents;
    /// `Err` lists every problem (a `kid` in two places is one).
    pub fn current_keys(&self) -> Result<Keys, Vec<String>> {
        let mut docs = read_files(&self.config.jwks)?;
        for u in &self.urls {
            if let Some(doc) = u.doc.lock().ok().and_then(|d| d.clone()) {
                docs.push((u.url.clone(), doc));
            }
        }
        Keys::from_jwks(&docs)
    }

    /// Puts new keys in force and forgets every token verified under the old ones.
    pub fn rotate(&self, keys: Keys) {
        self.keys.store(Arc::new(keys));
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A token verified before, under the keys in force, unless it expired since.
    pub fn cached(&self, digest: &Sha256Digest, now_s: u64) -> Option<Arc<Admitted>> {
        let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
        let cache = self.cache.lock().ok()?;
        if cache.0 != generation {
            return None;
        }
        cache
            .1
            .get(digest)
            .filter(|a| now_s <= a.token.expires_at.saturating_add(self.rules.skew_s))
            .cloned()
    }

    /// An opaque token introspection refused less than [`REFUSED_FOR_S`] ago: that refusal.
    pub fn refused(&self, digest: &Sha256Digest, now_s: u64) -> Option<palisade_policy::Refusal> {
        let refused = self.refused.lock().ok()?;
        refused
            .get(digest)
            .filter(|(until, _)| now_s < *until)
            .map(|(_, r)| r.clone())
    }

    /// Remembers an introspection's refusal; past [`CACHE_ENTRIES`] the memory starts again
    /// (a flood of distinct tokens costs introspections, never memory).
    pub fn remember_refused(&self, digest: Sha256Digest, now_s: u64, r: palisade_policy::Refusal) {
        if let Ok(mut refused) = self.refused.lock() {
            if refused.len() >= CACHE_ENTRIES {
                refused.clear();
            }
            refused.insert(digest, (now_s + REFUSED_FOR_S, r));
        }
    }

    pub fn remember(&self, admitted: Arc<Admitted>) {
        let generation = self.generation.load(std::sync::atomic::Ordering::Acquire);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.0 != generation || cache.1.len() >= CACHE_ENTRIES {
                *cache = (generation, HashMap::new());
            }
            cache.1.insert(admitted.token.digest, admitted);
        }
    }
}

/// The issuers' keys from JWKS files.
pub fn load_keys(paths: &[PathBuf]) -> Result<Keys, Vec<String>> {
    Keys::from_jwks(&read_files(paths)?)
}

fn read_files(paths: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, Vec<String>> {
    let mut files = Vec::with_capacity(paths.len());
    let mut problems = Vec::new();
    for p in paths {
        match std::fs::read(p) {
            Ok(bytes) if bytes.len() <= 1 << 20 => files.push((p.display().to_string(), bytes)),
            Ok(_) => problems.push(format!("{}: larger than 1 MiB", p.display())),
            Err(e) => problems.push(format!("{}: {e}", p.display())),
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(problems)
    }
}
