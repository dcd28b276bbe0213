//! In-memory coordination shared by the requests of one process: when a lease was first seen, tools seen drifted. Each table is
//! bounded or holds only what a running request holds.

use std::collections::HashMap;
use std::sync::Mutex;

/// When this sidecar first saw a lease that has no `issued_at` (its window starts then).
/// Bounded: when full, the oldest half is forgotten (such a lease then starts a new window,
/// which is the same as it never having been seen). Kept in memory: after a restart a
/// never-used lease starts a new window; a used one is refused by its fence anyway.
#[derive(Default)]
pub struct FirstSeen {
    map: Mutex<HashMap<String, i64>>,
}

impl FirstSeen {
    const CAP: usize = 100_000;

    pub fn get_or_insert(&self, lease_id: &str, now_ms: i64) -> i64 {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = map.get(lease_id) {
            return *t;
        }
        if map.len() >= Self::CAP {
            let mut times: Vec<i64> = map.values().copied().collect();
            times.sort_unstable();
            let cutoff = times[times.len() / 2];
            map.retain(|_, t| *t > cutoff);
        }
        map.insert(lease_id.to_owned(), now_ms);
        now_ms
    }
}

/// Tools whose latest listing showed their pinned definition changed, with the digest of the
/// bundle that pinned them.
#[derive(Debug, Default)]
pub struct Drifted(Mutex<HashMap<String, String>>);

impl Drifted {
    /// Whether `tool`, as pinned by the bundle `digest`, was last listed changed.
    pub fn is_drifted(&self, digest: &str, tool: &str) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(tool).is_some_and(|d| d == digest)
    }

    pub(crate) fn mark(&self, digest: &str, tool: &str, drifted: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if drifted {
            map.insert(tool.to_owned(), digest.to_owned());
        } else {
            map.remove(tool);
        }
    }
}

/// What the MCP server's tools were last checked against (`mcp::checked`, issue 59).
#[derive(Default)]
pub struct ToolsChecked {
    /// The bundle digest and the session generation of the last check; held across a
    /// check, so one runs at a time.
    pub last: tokio::sync::Mutex<Option<(String, u64)>>,
    /// Client sessions begun (`initialize` passed through): a check counts for the
    /// sessions begun before it.
    pub sessions: std::sync::atomic::AtomicU64,
}
