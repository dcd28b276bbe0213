//! `palisade replay` (SPEC §12): recorded traffic against a target, open loop.
//!
//! Every request has an intended send time — from `--rate` (a constant arrival rate) or from
//! the recording's own timing scaled by `--speed` — and its latency is measured from that time
//! to the end of its response body. A target that stalls therefore shows the stall in every
//! request scheduled behind it (no coordinated omission). `--concurrency` caps requests in
//! flight; a request that is due while the cap is reached waits for a slot (its latency still
//! counts from when it was due) and is counted as delayed. The run ends at `--duration` or
//! after `--requests`, whichever comes first; requests still in flight are waited for.
//!
//! With a lease key the replayer acts as the agent's gateway ([`lease::Minter`]).

pub mod har;
pub mod lease;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Uri};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::net::body;
use crate::net::headers;
use crate::net::upstream::Upstream;

/// How requests are spread over time.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// N requests per second, cycling through the recording.
    Rate(f64),
    /// The recording's own timing, X times as fast, repeated until the run ends.
    Speed(f64),
}

pub struct Options {
    pub target: Uri,
    pub pace: Pace,
    pub duration: Duration,
    pub requests: Option<u64>,
    pub concurrency: usize,
    pub minter: Option<lease::Minter>,
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

#[derive(Debug, Default)]
struct Stats {
    latency_us: Option<hdrhistogram::Histogram<u64>>,
    statuses: BTreeMap<u16, u64>,
    refusals: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    completed: u64,
}

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    pub sent: u64,
    /// Due before the end of the run but not sent by then (the target could not keep up).
    pub unsent: u64,
    pub completed: u64,
    pub delayed: u64,
    pub skipped_unreplayable: usize,
    pub skipped_malformed: usize,
    pub elapsed: Duration,
    pub statuses: BTreeMap<u16, u64>,
    pub refusals: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
    /// p50, p90, p99, p99.9, max in milliseconds.
    pub latency_ms: [f64; 5],
}

impl Report {
    pub fn to_json(&self) -> Value {
        let secs = self.elapsed.as_secs_f64();
        json!({
            "sent": self.sent,
            "unsent_overloaded": self.unsent,
            "completed": self.completed,
            "delayed_by_concurrency_cap": self.delayed,
            "skipped": {"unreplayable": self.skipped_unreplayable, "malformed": self.skipped_malformed},
            "elapsed_s": secs,
            "throughput_rps": if secs > 0.0 { self.completed as f64 / secs } else { 0.0 },
            "statuses": self.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "refusals": self.refusals,
            "errors": self.errors,
            "latency_ms": {"p50": self.latency_ms[0], "p90": self.latency_ms[1], "p99": self.latency_ms[2],
                           "p99.9": self.latency_ms[3], "max": self.latency_ms[4]},
        })
    }

    /// The final table.
    pub fn table(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let mut s = String::new();
        s.push_str(&format!(
            "requests    sent {}, completed {}, delayed by the concurrency cap {}, due but unsent at the end {}\n",
            self.sent, self.completed, self.delayed, self.unsent
        ));
        s.push_str(&format!(
            "skipped     unreplayable {}, malformed {}\n",
            self.skipped_unreplayable, self.skipped_malformed
        ));
        s.push_str(&format!(
            "throughput  {:.1} req/s over {:.1} s\n",
            if secs > 0.0 {
                self.completed as f64 / secs
            } else {
                0.0
            },
            secs
        ));
        let l = self.latency_ms;
        s.push_str(&format!(
            "latency ms  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}  (from each request's intended send time)\n",
            l[0], l[1], l[2], l[3], l[4]
        ));
        let join = |m: &mut dyn Iterator<Item = String>| m.collect::<Vec<_>>().join(", ");
        s.push_str(&format!(
            "statuses    {}\n",
            join(&mut self.statuses.iter().map(|(k, v)| format!("{k}: {v}")))
        ));
        if !self.refusals.is_empty() {
            s.push_str(&format!(
                "refusals    {}\n",
                join(&mut self.refusals.iter().map(|(k, v)| format!("{k}: {v}")))
            ));
        }
        if !self.errors.is_empty() {
            s.push_str(&format!(
                "errors      {}\n",
                join(&mut self.errors.iter().map(|(k, v)| format!("{k}: {v}")))
            ));
        }
        s
    }
}

/// The `code` of a Palisade refusal in a response body: a problem document's, or the `data`
/// of a JSON-RPC error (MCP).
fn refusal_code(content_type: Option<&str>, body: &[u8]) -> Option<String> {
    let ct = content_type?;
    if !ct.contains("json") {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let code = v
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| v.get("error")?.get("data")?.get("code")?.as_str())?;
    code.starts_with("ERR_").then(|| code.to_owned())
}

/// The intended offset of request `k`, or `None` past the end of the run.
fn due(pace: Pace, entries: &[har::Recorded], k: u64) -> Duration {
    match pace {
        Pace::Rate(r) => Duration::from_secs_f64(k as f64 / r),
        Pace::Speed(x) => {
            let n = entries.len() as u64;
            // One pass lasts as long as the recording, plus one gap of its mean spacing.
            let last = entries.last().map_or(0, |e| e.offset_ms);
            let span = last + last / n.max(1) + 1;
            let pass = k / n;
            let at = pass * span + entries[(k % n) as usize].offset_ms;
            Duration::from_secs_f64(at as f64 / 1000.0 / x)
        }
    }
}

/// How many requests from `k` on were due before `duration` (bounded by `requests`).
fn count_due(
    pace: Pace,
    entries: &[har::Recorded],
    k: u64,
    duration: Duration,
    requests: Option<u64>,
) -> u64 {
    let limit = requests.unwrap_or(u64::MAX);
    match pace {
        Pace::Rate(r) => {
            let total = (duration.as_secs_f64() * r).ceil() as u64;
            total.min(limit).saturating_sub(k)
        }
        Pace::Speed(_) => {
            let mut n = 0;
            // Bounded: at most 10 million steps, far past any real run.
            for j in k..limit.min(k + 10_000_000) {
                if due(pace, entries, j) >= duration {
                    break;
                }
                n += 1;
            }
            n
        }
    }
}

/// Replays `recording` as `opts` say.
pub async fn run(recording: har::Recording, opts: Options) -> Result<Report, String> {
    if recording.entries.is_empty() {
        return Err("the recording has no replayable entries".into());
    }
    let client = Upstream::with_base(
        opts.target.clone(),
        Duration::from_secs(5),
        // The run's own bound: a request never outlives it by more than this.
        opts.duration + Duration::from_secs(60),
        None,
    )
    .map_err(|e| e.to_string())?;
    let stats = Arc::new(Mutex::new(Stats {
        latency_us: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).ok(),
        ..Stats::default()
    }));
    let slots = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let minter = opts.minter.map(Arc::new);
    let entries = Arc::new(recording.entries);
    let start = Instant::now();
    let end = start + opts.duration;
    let mut sent = 0u64;
    let mut delayed = 0u64;
    let mut unsent = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    let progress = opts.progress.then(|| {
        let stats = stats.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let s = stats.lock().unwrap_or_else(|p| p.into_inner());
                let p99 = s
                    .latency_us
                    .as_ref()
                    .map_or(0.0, |h| h.value_at_quantile(0.99) as f64 / 1000.0);
                eprintln!(
                    "replay: {:>4.0}s  completed {}  p99 {:.2} ms",
                    start.elapsed().as_secs_f64(),
                    s.completed,
                    p99
                );
            }
        })
    });
    for k in 0u64.. {
        if opts.requests.is_some_and(|n| k >= n) {
            break;
        }
        let intended = start + due(opts.pace, &entries, k);
        if intended >= end {
            break;
        }
        if Instant::now() >= end {
            // Overloaded: requests were due before the end but could not be sent by then.
            // They are counted, not measured (they have no response to time).
            unsent = count_due(opts.pace, &entries, k, opts.duration, opts.requests);
            break;
        }
        tokio::time::sleep_until(intended).await;
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                delayed += 1;
                match slots.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => break,
                }
            }
        };
        sent += 1;
        let entry = entries[(k % entries.len() as u64) as usize].clone();
        let (client, stats, minter, target) = (
            client.clone(),
            stats.clone(),
            minter.clone(),
            opts.target.clone(),
        );
        tasks.spawn(async move {
            let outcome = send_one(&client, &target, entry, minter.as_deref()).await;
            let latency = intended.elapsed();
            let mut s = stats.lock().unwrap_or_else(|p| p.into_inner());
            s.completed += 1;
            if let Some(h) = s.latency_us.as_mut() {
                let _ = h.record((latency.as_micros() as u64).max(1));
            }
            match outcome {
                Ok((status, code)) => {
                    *s.statuses.entry(status).or_default() += 1;
                    if let Some(c) = code {
                        *s.refusals.entry(c).or_default() += 1;
                    }
                }
                Err(kind) => *s.errors.entry(kind).or_default() += 1,
            }
            drop(permit);
        });
        // Reap finished tasks as we go, so the set stays as small as what is in flight.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    if let Some(p) = progress {
        p.abort();
    }
    let elapsed = start.elapsed();
    let s = stats.lock().unwrap_or_else(|p| p.into_inner());
    let q = |quantile: f64| {
        s.latency_us
            .as_ref()
            .map_or(0.0, |h| h.value_at_quantile(quantile) as f64 / 1000.0)
    };
    Ok(Report {
        sent,
        unsent,
        completed: s.completed,
        delayed,
        skipped_unreplayable: recording.skipped_unreplayable,
        skipped_malformed: recording.skipped_malformed,
        elapsed,
        statuses: s.statuses.clone(),
        refusals: s.refusals.clone(),
        errors: s.errors.clone(),
        latency_ms: [
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            s.latency_us
                .as_ref()
                .map_or(0.0, |h| h.max() as f64 / 1000.0),
        ],
    })
}

/// Sends one recorded request (with a minted lease when it is a write) and reads the whole
/// answer. `Ok((status, refusal code))`, or `Err(kind of transport failure)`.
async fn send_one(
    client: &Upstream,
    target: &Uri,
    entry: har::Recorded,
    minter: Option<&lease::Minter>,
) -> Result<(u16, Option<String>), String> {
    let uri = client
        .uri_for(&entry.path_and_query)
        .map_err(|_| "bad-target".to_owned())?;
    let mut req = Request::builder().method(entry.method.clone()).uri(uri);
    if let Some(a) = target.authority() {
        req = req.header(header::HOST, a.as_str());
    }
    for (n, v) in &entry.headers {
        // A recording made through a sidecar carries old leases: never replay those.
        if n.as_str().starts_with("agent-compensation-") {
            continue;
        }
        req = req.header(n, v);
    }
    let _guard = match minter {
        Some(m) if lease::is_write(&entry.method) => {
            let minted = m.mint(client, &entry).await?;
            req = req.header(headers::LEASE_HEADER, minted.lease);
            if let Some(inv) = minted.inverse {
                req = req.header(headers::INVERSE_HEADER, inv);
            }
            if let Some(auth) = minted.authorization {
                if !entry
                    .headers
                    .iter()
                    .any(|(n, _)| *n == header::AUTHORIZATION)
                {
                    req = req.header(header::AUTHORIZATION, auth);
                }
            }
            Some(minted.guard)
        }
        _ => None,
    };
    let req = req
        .body(body::full(entry.body.clone()))
        .map_err(|_| "bad-request".to_owned())?;
    let resp = client.send(req).await.map_err(|e| match e {
        crate::net::upstream::UpstreamError::Connect(_) => "connect".to_owned(),
        crate::net::upstream::UpstreamError::Timeout(_) => "timeout".to_owned(),
        _ => "failed".to_owned(),
    })?;
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes: Bytes = body::collect_limited(resp.into_body(), 64 << 20)
        .await
        .map_err(|_| "body".to_owned())?;
    Ok((status, refusal_code(ct.as_deref(), &bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes_are_read_from_problems_and_json_rpc_errors() {
        let p = br#"{"type":"urn:palisade:error:x","code":"ERR_LEASE_REQUIRED"}"#;
        assert_eq!(
            refusal_code(Some("application/problem+json"), p).as_deref(),
            Some("ERR_LEASE_REQUIRED")
        );
        let rpc = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"data":{"code":"ERR_TOOL_DRIFTED"}}}"#;
        assert_eq!(
            refusal_code(Some("application/json"), rpc).as_deref(),
            Some("ERR_TOOL_DRIFTED")
        );
        assert_eq!(refusal_code(Some("text/plain"), b"ERR_X"), None);
        assert_eq!(
            refusal_code(Some("application/json"), br#"{"code":"E1"}"#),
            None
        );
    }

    #[test]
    fn pacing_by_rate_and_by_recording() {
        let e = |ms| har::Recorded {
            offset_ms: ms,
            method: http::Method::GET,
            path_and_query: "/".into(),
            headers: vec![],
            body: Bytes::new(),
        };
        let entries = vec![e(0), e(100), e(300)];
        assert_eq!(
            due(Pace::Rate(10.0), &entries, 5),
            Duration::from_millis(500)
        );
        assert_eq!(
            due(Pace::Speed(1.0), &entries, 2),
            Duration::from_millis(300)
        );
        assert_eq!(
            due(Pace::Speed(2.0), &entries, 1),
            Duration::from_millis(50)
        );
        // The second pass starts after the first, one mean gap later.
        assert_eq!(
            due(Pace::Speed(1.0), &entries, 3),
            Duration::from_millis(401)
        );
    }
}
