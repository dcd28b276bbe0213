//! Write enforcement (SPEC §5.2), in the SPEC's order: pure checks first, I/O last.
//!
//! ```text
//! unbound? (404) → 1 lease present (428) → 2–8 policy::lease::verify
//!   → 10 inverse staged and matching → [per-resource lock]
//!   → 11 fence epoch (store read) → 12 pre-image (upstream GET)
//!   → durable: advance epoch + stage inverse (store, fsync) → Permit
//! ```
//! The caller forwards the write while holding the [`Permit`] (and so the resource's lock),
//! then calls [`commit`] for the receipt. A refusal at any step goes through [`refuse`]:
//! problem+json, a signed rejection receipt in the chain, a drift event; nothing reaches the
//! upstream and no epoch moves.
//!
//! A permit says what happens next ([`Disposition`]): forward, dry-run (nothing moves) or
//! hold in escrow (nothing moves until an operator releases it, when every check runs again).
//!
//! Not here yet: contract checks 8–9 from RICH bindings (issue 5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::drift::{DriftEvent, EventContext};
use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease::{self, RequestFacts, VerifiedLease, VerifyContext};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind, SealedReceipt};
use palisade_policy::rich::{Bundle, Capability};
use palisade_policy::{fence, inverse, target, ErrorCode, Refusal};
use tokio::sync::OwnedMutexGuard;

use crate::body::{self, ProxyBody};
use crate::clock::AnchoredClock;
use crate::config::{Config, UnboundWrites};
use crate::drift_sink::DriftSink;
use crate::pipeline::ConnInfo;
use crate::problem::Problem;
use crate::store::{Advance, Attachments, Store, StoreError, WriteIntent};
use crate::upstream::Upstream;

pub const LEASE_HEADER: &str = "agent-compensation-lease";
pub const INVERSE_HEADER: &str = "agent-compensation-inverse";
pub const RECEIPT_HEADER: &str = "agent-commit-receipt";
pub const FENCE_HEADER: &str = "agent-fence-token";
pub const DRY_RUN_HEADER: &str = "agent-dry-run";

/// Everything write enforcement needs, built once at start.
pub struct Enforcement {
    pub key: Arc<KeyPair>,
    pub trust: TrustStore,
    pub store: Arc<dyn Store>,
    pub locks: ResourceLocks,
    pub clock: AnchoredClock,
    pub first_seen: FirstSeen,
    pub drift: DriftSink,
    /// Idempotency keys whose first request is still running (SPEC §5.6).
    pub idempotency: crate::idempotency::InFlight,
}

impl Enforcement {
    /// Loads the sidecar key and the issuers, opens the store, starts the drift sink. Must run
    /// inside the runtime (the drift sink spawns its writer task).
    pub fn load(config: &Config) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let key_path = config
            .signing_key
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_SIGNING_KEY.into());
        let pem = std::fs::read_to_string(&key_path)
            .with_context(|| format!("signing.key: cannot read {}", key_path.display()))?;
        let key = Arc::new(
            KeyPair::from_pkcs8_pem(&pem)
                .with_context(|| format!("signing.key: {}", key_path.display()))?,
        );
        let mut trust = TrustStore::new();
        trust.insert(key.trusted("sidecar"))?;
        if let Some(path) = &config.trust_issuers {
            let bytes = std::fs::read(path)
                .with_context(|| format!("trust.issuers: cannot read {}", path.display()))?;
            trust
                .extend_from_issuers_json(&bytes)
                .with_context(|| format!("trust.issuers: {}", path.display()))?;
        }
        let store: Arc<dyn Store> = match config.store_kind {
            crate::config::StoreKind::Embedded => Arc::new(
                crate::store::embedded::EmbeddedStore::open(&config.store_path, key.clone())
                    .context("store")?,
            ),
            crate::config::StoreKind::Postgres => {
                anyhow::bail!("store.kind: \"postgres\" is not available in this build")
            }
        };
        Ok(Self {
            key,
            trust,
            store,
            locks: ResourceLocks::default(),
            clock: AnchoredClock::new(),
            first_seen: FirstSeen::default(),
            drift: DriftSink::start(&config.drift_sinks),
            idempotency: Default::default(),
        })
    }
}

/// In-process per-resource write locks (SPEC §5.3). One sidecar owns an embedded store, so an
/// in-process lock is the lock every writer respects; a shared (PostgreSQL) store takes its
/// lock in the database instead.
#[derive(Default)]
pub struct ResourceLocks {
    /// Weak entries: a lock lives as long as someone holds or waits for it; dead entries are
    /// swept when the map grows.
    map: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl ResourceLocks {
    pub async fn lock(&self, resource: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = map.get(resource).and_then(Weak::upgrade) {
                l
            } else {
                if map.len() > 4096 {
                    map.retain(|_, w| w.strong_count() > 0);
                }
                let l = Arc::new(tokio::sync::Mutex::new(()));
                map.insert(resource.to_owned(), Arc::downgrade(&l));
                l
            }
        };
        lock.lock_owned().await
    }
}

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

/// A write that passed every check and whose epoch advance is durable. Holding it holds the
/// resource's lock, so the forward happens under the lock too.
pub struct Permit {
    _lock: OwnedMutexGuard<()>,
    lease: VerifiedLease,
    target: String,
    request_digest: Sha256Digest,
    pre_image: Option<Sha256Digest>,
    /// An escrowed write on its release: forwarded, not held again.
    released: bool,
}

/// A refused write: the refusal, and the resource's epoch when the refusal came from the
/// fence (checks 11–12), for `current_epoch` and `Agent-Fence-Token`.
#[derive(Debug)]
pub struct Denied {
    pub refusal: Refusal,
    pub current_epoch: Option<u64>,
    /// Check 12's GET met another deployment identity: the peer, for the drift event.
    pub peer: Option<crate::peer_identity::Mismatch>,
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Self {
        Self {
            refusal,
            current_epoch: None,
            peer: None,
        }
    }
}

/// What a permitted write does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Its epoch advance is durable: forward it.
    Forward,
    /// DRY_RUN_SHADOW: to the shadow (or nowhere); no epoch moved.
    DryRun,
    /// HUMAN_ESCROW, first pass: hold it durably; no epoch moved.
    Hold,
}

impl Permit {
    /// The lease's epoch (what a forwarded write advanced its resource to).
    pub fn epoch(&self) -> u64 {
        self.lease.lease().cas_fence_epoch
    }

    pub fn disposition(&self) -> Disposition {
        match self.lease.lease().recovery_mode {
            lease::RecoveryMode::DryRunShadow => Disposition::DryRun,
            lease::RecoveryMode::HumanEscrow if !self.released => Disposition::Hold,
            _ => Disposition::Forward,
        }
    }

    pub fn is_dry_run(&self) -> bool {
        self.disposition() == Disposition::DryRun
    }

    pub fn lease(&self) -> &lease::Lease {
        self.lease.lease()
    }

    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn request_digest(&self) -> Sha256Digest {
        self.request_digest
    }

    pub fn pre_image(&self) -> Option<Sha256Digest> {
        self.pre_image
    }
}

/// Facts about the request that receipts and events name.
#[derive(Debug, Clone)]
pub struct WriteContext {
    pub method: http::Method,
    pub trace_id: String,
    /// `METHOD path` without the query.
    pub operation: String,
    /// The bundle in force (`sha-256:` of the lockfile), for receipts.
    pub lockfile_digest: Option<String>,
    /// The bundle's `bindingId` and the bound contract's digest, for drift events.
    pub binding_id: Option<String>,
    pub contract_digest: Option<String>,
    /// The binding's upstream timeout (`runtime.timeout`, else `operational.timeout`).
    pub timeout: Option<std::time::Duration>,
    /// The binding's `deployment.identity`: the SPIFFE ID the upstream must present.
    pub identity: Option<String>,
}

impl WriteContext {
    pub fn new(method: http::Method, trace_id: String, operation: String) -> Self {
        Self {
            method,
            trace_id,
            operation,
            lockfile_digest: None,
            binding_id: None,
            contract_digest: None,
            timeout: None,
            identity: None,
        }
    }

    /// Records the bundle and the capability (if any) this request is decided by.
    pub fn bind(&mut self, bundle: Option<&Bundle>, binding: &Binding<'_>) {
        if let Some(b) = bundle {
            self.lockfile_digest = Some(b.digest.clone());
            self.binding_id = Some(b.binding_id.clone());
        }
        if let Binding::Bound(cap) = binding {
            self.contract_digest = Some(cap.contract.digest.clone());
            self.identity = cap.deployment_identity.clone();
            self.timeout = cap
                .runtime
                .timeout_ms
                .or(cap.contract.timeout_ms)
                .map(std::time::Duration::from_millis);
        }
    }
}

/// A lease or inverse as the write carried it.
pub enum Carried<'a> {
    /// An HTTP header: the lease as base64url or raw JSON, the inverse as base64url.
    Header(&'a HeaderValue),
    /// A JSON document already (MCP `params._meta`).
    Json(Vec<u8>),
}

impl Carried<'_> {
    fn lease_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, Refusal> {
        match self {
            Carried::Header(v) => Ok(std::borrow::Cow::Owned(
                lease::decode_header(v.as_bytes())?.into_owned(),
            )),
            Carried::Json(b) => Ok(std::borrow::Cow::Borrowed(b)),
        }
    }

    fn inverse_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, Refusal> {
        match self {
            Carried::Header(v) => URL_SAFE_NO_PAD
                .decode(v.as_bytes())
                .map(std::borrow::Cow::Owned)
                .map_err(|_| {
                    Refusal::new(
                        ErrorCode::InverseNotStaged,
                        "Agent-Compensation-Inverse is not unpadded base64url",
                    )
                }),
            Carried::Json(b) => Ok(std::borrow::Cow::Borrowed(b)),
        }
    }
}

/// What the checks need from a write, whatever protocol carried it.
pub struct WriteFacts<'a> {
    /// Check 1: the lease, if the write carries one.
    pub lease: Option<Carried<'a>>,
    /// Check 10: an inverse sent with the write (else the staged one is used).
    pub inverse: Option<Carried<'a>>,
    /// Check 7: the request's normalised target URI (`None`: it cannot be formed).
    pub target: Option<String>,
    /// The fenced resource; `None`: the target without its query (SPEC §4.3).
    pub resource: Option<String>,
    /// Check 9's input: an HTTP body, or a tool call's `arguments`.
    pub input: &'a [u8],
    /// The whole request as sent (its digest goes into the receipt).
    pub body: &'a [u8],
    /// The path and query, recorded with the lease (and GET for check 12 on HTTP).
    pub path: &'a str,
    /// The request's headers, for check 12's GET; `None` skips check 12 (an MCP tool call
    /// has no representation to fetch, SPEC §5.2).
    pub headers: Option<&'a http::HeaderMap>,
}

impl<'a> WriteFacts<'a> {
    /// An HTTP write: lease and inverse from the PTCL headers, the target from the request.
    pub fn http(parts: &'a http::request::Parts, body: &'a [u8], who: &Requester) -> Self {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        Self {
            lease: parts.headers.get(LEASE_HEADER).map(Carried::Header),
            inverse: parts.headers.get(INVERSE_HEADER).map(Carried::Header),
            target: who
                .origin
                .as_deref()
                .and_then(|o| target::request_target(o, path).ok()),
            resource: None,
            input: body,
            body,
            path,
            headers: Some(&parts.headers),
        }
    }
}

/// How the bundle in force binds a request (SPEC §4, §7).
#[derive(Debug, Clone, Copy)]
pub enum Binding<'a> {
    /// No bundle configured: every operation is unbound.
    NoBundle,
    /// A bundle is loaded and no capability matches.
    Unbound,
    Bound(&'a Capability),
}

impl<'a> Binding<'a> {
    /// Routes a request through `bundle`.
    pub fn of(bundle: Option<&'a Bundle>, method: &http::Method, path: &str) -> Self {
        match bundle {
            None => Binding::NoBundle,
            Some(b) => match b.route(method.as_str(), path) {
                Some(cap) => Binding::Bound(cap),
                None => Binding::Unbound,
            },
        }
    }

    pub fn capability(&self) -> Option<&'a Capability> {
        match self {
            Binding::Bound(c) => Some(c),
            _ => None,
        }
    }
}

/// Who sent a write, as the checks need it: the origin its `sor_target_uri` must name and the
/// caller identity an `agent_id` must match. Taken from the connection for a live request and
/// from the escrow record for a released one.
#[derive(Debug, Clone, Default)]
pub struct Requester {
    pub origin: Option<String>,
    pub caller: Option<String>,
}

impl Requester {
    pub fn of(config: &Config, parts: &http::request::Parts, conn: &ConnInfo) -> Self {
        Self {
            origin: origin(config, parts, conn),
            caller: conn.caller(&parts.headers),
        }
    }
}

/// The origin agents name in `sor_target_uri`: `listen.public_base`, else the request's own.
pub(crate) fn origin(
    config: &Config,
    parts: &http::request::Parts,
    conn: &ConnInfo,
) -> Option<String> {
    if let Some(base) = &config.public_base {
        return Some(base.clone());
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))?;
    Some(format!(
        "{}://{host}",
        if conn.tls { "https" } else { "http" }
    ))
}

/// Runs checks in SPEC order; `Ok` means the write may go on as its [`Permit::disposition`]
/// says. `releasing`: an escrowed write being released (it is forwarded, not held again).
#[allow(clippy::too_many_arguments)] // each is a distinct input of the checks; none travel together elsewhere
pub async fn check(
    config: &Config,
    enf: &Enforcement,
    upstream: &Upstream,
    facts: WriteFacts<'_>,
    who: &Requester,
    binding: Binding<'_>,
    releasing: bool,
) -> Result<Permit, Denied> {
    // SPEC §4.2: without a lockfile every write is unbound.
    if binding.capability().is_none() && config.unbound_writes == UnboundWrites::Deny {
        return Err(Refusal::new(
            ErrorCode::UnboundOperation,
            "no lockfile binding for this operation and rich.unbound_writes is deny",
        )
        .into());
    }
    // Check 1.
    let carried = facts.lease.as_ref().ok_or_else(|| {
        Refusal::new(
            ErrorCode::LeaseRequired,
            "a write needs a compensation lease",
        )
    })?;
    let raw = carried.lease_bytes()?;
    let raw: &[u8] = &raw;
    let body = facts.body;
    let target = facts.target.clone().ok_or_else(|| {
        Refusal::new(
            ErrorCode::TargetMismatch,
            "the request's target cannot be formed (Host missing or invalid)",
        )
    })?;
    // Checks 2–8. The window of a lease without issued_at starts when first seen (check 6).
    // Scoped so that the borrowed callback is gone before the next await (the future must be
    // Send for every lifetime).
    let verified = {
        let now = enf.clock.now_ms();
        let first_seen = |lease_id: &str| enf.first_seen.get_or_insert(lease_id, now);
        let cx = VerifyContext {
            now_ms: now,
            max_clock_skew_ms: config.max_clock_skew.as_millis() as i64,
            first_seen: Some(&first_seen),
            request: Some(RequestFacts {
                target: &target,
                // Check 8: the bound contract's reversibility gates the recovery mode.
                reversibility: binding.capability().map(|c| c.contract.reversibility),
            }),
        };
        lease::verify(raw, &enf.trust, &cx)
    };
    let verified = verified?;
    let l = verified.lease();
    // Check 9: the body against the bound contract's structural.input.
    if let Some(cap) = binding.capability() {
        palisade_policy::rich::check_input(&cap.contract, facts.input, config.max_json_depth)?;
    }
    // A lease this sidecar granted names its caller (SPEC §5.7): only that caller may use it.
    if let Some(agent) = &l.agent_id {
        if who.caller.as_deref() != Some(agent.as_str()) {
            return Err(Refusal::new(
                ErrorCode::LeaseNotYours,
                "the lease was granted to another caller",
            )
            .into());
        }
    }

    // Check 10: the inverse travels inline or was staged earlier.
    let staged = match &facts.inverse {
        Some(carried) => Some(inverse::parse(
            &carried.inverse_bytes()?,
            config.max_json_depth,
        )?),
        None => match enf
            .store
            .inverse(&l.lease_id)
            .await
            .map_err(store_refusal)?
        {
            Some(bytes) => Some(inverse::parse(&bytes, config.max_json_depth)?),
            None => None,
        },
    };
    inverse::check(staged.as_ref(), l)?;

    // Checks 11–12 and the forward happen under the resource's lock.
    let resource = facts
        .resource
        .clone()
        .unwrap_or_else(|| target::resource_key(&target).to_owned());
    let pq = facts.path;
    let guard = enf.locks.lock(&resource).await;
    let current = enf.store.epoch(&resource).await.map_err(store_refusal)?;
    let at_epoch = |refusal| Denied {
        refusal,
        current_epoch: Some(current),
        peer: None,
    };
    fence::check_epoch(current, l.cas_fence_epoch).map_err(at_epoch)?;
    // Check 12 applies to HTTP resources only (`facts.headers` is `None` for a tool call).
    let pre_image = if let (true, Some(headers)) = (config.pre_image_fetch, facts.headers) {
        let identity = binding
            .capability()
            .and_then(|c| c.deployment_identity.as_deref());
        let actual = fetch_state(config, upstream, pq, headers, identity)
            .await
            .map_err(|d| Denied {
                current_epoch: Some(current),
                ..d
            })?;
        fence::check_pre_image(&l.pre_image_state_hash, &actual.digest).map_err(at_epoch)?;
        Some(actual)
    } else {
        None
    };
    // SNAPSHOT_RESTORE keeps what the write replaces.
    let snapshot = match (l.recovery_mode, &pre_image) {
        (lease::RecoveryMode::SnapshotRestore, Some(state)) => Some(state.snapshot()),
        _ => None,
    };

    // A dry run passes every check the real write would, but moves nothing; so does an
    // escrowed write until it is released (SPEC §5.4).
    let moves = match l.recovery_mode {
        lease::RecoveryMode::DryRunShadow => false,
        lease::RecoveryMode::HumanEscrow => releasing,
        _ => true,
    };
    if !moves {
        return Ok(Permit {
            _lock: guard,
            target,
            request_digest: Sha256Digest::of(body),
            pre_image: pre_image.map(|s| s.digest),
            lease: verified,
            released: releasing,
        });
    }

    // Durable before the write leaves (SPEC §5.3).
    let record = serde_json::json!({
        "lease_id": l.lease_id,
        "lease_digest": verified.digest().to_string(),
        "recovery_mode": l.recovery_mode.as_str(),
        "expires_at_ms": verified.expires_at_ms(),
        "resource": resource,
        "path": pq,
        "epoch": l.cas_fence_epoch,
        "state": "committed",
        "agent_id": l.agent_id,
    });
    let intent = WriteIntent {
        resource: resource.clone(),
        epoch: l.cas_fence_epoch,
        lease_id: l.lease_id.clone(),
        lease_record: serde_json::to_vec(&record).unwrap_or_default(),
        inverse: staged.map(|s| s.jcs),
        snapshot,
    };
    let waited = tokio::time::Instant::now();
    let advanced = enf.store.advance(intent).await;
    metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "advance")
        .record(waited.elapsed().as_secs_f64());
    match advanced.map_err(store_refusal)? {
        Advance::Advanced => {}
        Advance::Stale { current } => {
            return Err(Denied {
                refusal: Refusal::new(
                    ErrorCode::StaleFenceEpoch,
                    "another write advanced the resource's epoch first",
                ),
                current_epoch: Some(current),
                peer: None,
            })
        }
    }
    Ok(Permit {
        _lock: guard,
        target,
        request_digest: Sha256Digest::of(body),
        pre_image: pre_image.map(|s| s.digest),
        lease: verified,
        released: releasing,
    })
}

/// The `lease_id` of a refused lease document (which may not verify), for its receipt.
fn lease_id_hint(raw: &[u8]) -> Option<String> {
    let v = palisade_policy::json::parse(raw, lease::MAX_LEASE_DEPTH).ok()?;
    v.get("lease_id")?.as_str().map(str::to_owned)
}

pub(crate) fn store_refusal(e: StoreError) -> Refusal {
    tracing::warn!(error = %e, "store unavailable; refusing the write");
    Refusal::new(
        ErrorCode::StoreUnavailable,
        "the state store cannot record this write",
    )
}

/// The resource's representation as fetched for check 12: what SNAPSHOT_RESTORE puts back.
pub(crate) struct State {
    pub digest: Sha256Digest,
    /// `None` when the resource was absent (404/410).
    pub representation: Option<(Option<String>, Bytes)>,
}

impl State {
    /// The snapshot as stored: `{"absent":true}` or `{"content_type":…,"body_b64":…}`.
    fn snapshot(&self) -> Vec<u8> {
        let doc = match &self.representation {
            None => serde_json::json!({"absent": true}),
            Some((ct, body)) => serde_json::json!({
                "content_type": ct,
                "body_b64": URL_SAFE_NO_PAD.encode(body),
            }),
        };
        serde_json::to_vec(&doc).unwrap_or_default()
    }
}

/// Check 12's GET (and the lease authority's): the resource at `pq` as the upstream has it
/// now, fetched with the caller's `Authorization` and `Cookie`.
pub(crate) async fn fetch_state(
    config: &Config,
    upstream: &Upstream,
    pq: &str,
    headers: &http::HeaderMap,
    identity: Option<&str>,
) -> Result<State, Denied> {
    let unavailable = || {
        Denied::from(Refusal::new(
            ErrorCode::PreimageUnavailable,
            "the upstream did not return the resource's current representation",
        ))
    };
    let uri = upstream.uri_for(pq).map_err(|_| unavailable())?;
    let mut req = Request::get(uri);
    for name in [header::AUTHORIZATION, header::COOKIE, header::HOST] {
        if let Some(v) = headers.get(&name) {
            req = req.header(name, v.clone());
        }
    }
    let req = req.body(body::empty()).map_err(|_| unavailable())?;
    let resp = upstream.send_as(req, identity).await.map_err(|e| {
        tracing::warn!(error = %e, "pre-image fetch failed");
        match e {
            // Not the pinned deployment: the write would go to the same peer.
            crate::upstream::UpstreamError::Identity(m) => Denied {
                refusal: Refusal::new(
                    ErrorCode::DeploymentIdentity,
                    "the upstream's TLS identity is not the binding's deployment.identity",
                ),
                current_epoch: None,
                peer: Some(m),
            },
            _ => unavailable(),
        }
    })?;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = body::collect_limited(resp.into_body(), config.max_response)
        .await
        .map_err(|_| unavailable())?;
    let digest = fence::pre_image_digest(
        &fence::Fetched {
            status,
            content_type: content_type.as_deref(),
            body: &bytes,
        },
        config.max_json_depth,
    )?;
    let representation = (!matches!(status, 404 | 410)).then_some((content_type, bytes));
    Ok(State {
        digest,
        representation,
    })
}

fn receipt_header(r: &SealedReceipt) -> Option<HeaderValue> {
    receipt_header_value(&r.value)
}

/// `Agent-Commit-Receipt`: base64url of the receipt's JSON.
pub(crate) fn receipt_header_value(receipt: &serde_json::Value) -> Option<HeaderValue> {
    if !receipt.is_object() {
        return None;
    }
    HeaderValue::from_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(receipt).ok()?)).ok()
}

pub(crate) fn now_rfc3339(enf: &Enforcement) -> String {
    lease::format_rfc3339_ms(enf.clock.now_ms())
}

/// The `outcome` of a tool call answered with an interim result: its receipt is of kind
/// `interim`, not `commit`, and its lease is left with nothing to compensate (SPEC §7).
pub const INTERIM: &str = "interim";

/// After the forward: the commit receipt, `Agent-Commit-Receipt` and `Agent-Fence-Token`.
/// `outcome` marks what the receipt cannot otherwise say (`"uncertain"`: the upstream did
/// not answer in time, so the write may or may not have happened; [`INTERIM`]). `attach` builds what must
/// be stored with the receipt from the response as the client will get it (headers final
/// except the receipt).
pub async fn commit(
    enf: &Enforcement,
    permit: Permit,
    cx: &WriteContext,
    outcome: Option<&str>,
    resp: &mut Response<ProxyBody>,
    attach: impl FnOnce(&Response<ProxyBody>) -> Attachments,
) -> Option<SealedReceipt> {
    let l = permit.lease.lease();
    let dry_run = permit.is_dry_run();
    if dry_run {
        resp.headers_mut()
            .insert(DRY_RUN_HEADER, HeaderValue::from_static("1"));
    } else {
        resp.headers_mut()
            .insert(FENCE_HEADER, HeaderValue::from(l.cas_fence_epoch));
    }
    let kind = match outcome {
        _ if dry_run => ReceiptKind::DryRun,
        Some(INTERIM) => ReceiptKind::Interim,
        _ => ReceiptKind::Commit,
    };
    let body = ReceiptBody {
        outcome: if dry_run {
            Some("dry-run".to_owned())
        } else {
            outcome.map(str::to_owned)
        },
        upstream_status: Some(resp.status().as_u16()),
        ..permit_receipt(enf, &permit, cx, kind)
    };
    let attachments = attach(resp);
    let waited = tokio::time::Instant::now();
    let appended = enf.store.append_receipt_with(body, attachments).await;
    metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "receipt")
        .record(waited.elapsed().as_secs_f64());
    match appended {
        Ok(Some(sealed)) => {
            if let Some(v) = receipt_header(&sealed) {
                resp.headers_mut().insert(RECEIPT_HEADER, v);
            }
            Some(sealed)
        }
        Ok(None) => {
            tracing::error!(lease_id = %l.lease_id, "commit receipt refused by an escrow state change");
            None
        }
        // The write happened and its epoch is durable; only its receipt is missing. Say so
        // loudly: the audit chain will not show this write.
        Err(e) => {
            tracing::error!(error = %e, lease_id = %l.lease_id, "commit receipt not stored");
            None
        }
    }
}

/// A receipt body naming a permitted write: lease, target, epoch, method, digests, trace.
pub(crate) fn permit_receipt(
    enf: &Enforcement,
    permit: &Permit,
    cx: &WriteContext,
    kind: ReceiptKind,
) -> ReceiptBody {
    let l = permit.lease.lease();
    ReceiptBody {
        lease_id: Some(l.lease_id.clone()),
        sor_target_uri: Some(permit.target.clone()),
        cas_fence_epoch: Some(l.cas_fence_epoch),
        method: Some(cx.method.to_string()),
        request_digest: Some(permit.request_digest.to_string()),
        pre_image_state_hash: permit.pre_image.map(|d| d.to_string()),
        trace_id: Some(cx.trace_id.clone()),
        trace_anchor_ref: l.trace_anchor_ref.map(|d| d.to_string()),
        lockfile_digest: cx.lockfile_digest.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            kind,
            now_rfc3339(enf),
        )
    }
}

/// A refused write: problem+json with the rejection receipt, and a drift event.
pub async fn refuse(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
    current_epoch: Option<u64>,
) -> Response<ProxyBody> {
    refuse_as(
        enf,
        refusal,
        cx,
        lease_raw,
        evidence_body,
        current_epoch,
        None,
    )
    .await
}

/// [`refuse`] for a denied check: an identity mismatch at check 12 reports the peer (its
/// SPIFFE ID observed, its certificate as evidence), as a refused read does.
pub async fn refuse_denied(
    enf: &Enforcement,
    denied: &Denied,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
) -> Response<ProxyBody> {
    let (refusal, epoch, peer) = (&denied.refusal, denied.current_epoch, denied.peer.as_ref());
    refuse_as(enf, refusal, cx, lease_raw, evidence_body, epoch, peer).await
}

async fn refuse_as(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
    current_epoch: Option<u64>,
    peer: Option<&crate::peer_identity::Mismatch>,
) -> Response<ProxyBody> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let lease_id = lease_raw.and_then(lease_id_hint);
    let body = ReceiptBody {
        lease_id: lease_id.clone(),
        method: Some(cx.method.to_string()),
        code: Some(refusal.code.as_str().to_owned()),
        trace_id: Some(cx.trace_id.clone()),
        cas_fence_epoch: current_epoch,
        lockfile_digest: cx.lockfile_digest.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Rejection,
            now_rfc3339(enf),
        )
    };
    let sealed = enf.store.append_receipt(body).await;
    let observed = match peer {
        Some(m) => m.observed.clone().unwrap_or_else(|| "none".into()),
        None => cx.operation.clone(),
    };
    // A contract refusal's offending payload is the body; a peer's, its certificate; any
    // other's, the lease.
    let evidence = match peer {
        Some(m) => Some(m.certificate.clone()),
        None if refusal.code == ErrorCode::ContractInput => evidence_body.map(<[u8]>::to_vec),
        None => lease_raw.map(<[u8]>::to_vec),
    };
    if let Some(mut event) = DriftEvent::for_refusal(
        refusal,
        EventContext {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: now_rfc3339(enf),
            trace_id: cx.trace_id.clone(),
            observed_identifier: Some(observed),
            binding_id: cx.binding_id.clone(),
            expected_digest: cx.contract_digest.clone(),
            evidence,
        },
    ) {
        if let Some(m) = peer {
            event
                .diagnostics
                .insert("expectedIdentity".into(), m.expected.clone().into());
            event
                .diagnostics
                .insert("operation".into(), cx.operation.clone().into());
        }
        enf.drift.emit(&event);
    }
    let mut problem = Problem::from_refusal(refusal, &request_id, &cx.trace_id);
    if let Some(epoch) = current_epoch {
        problem
            .extensions
            .insert("current_epoch".into(), serde_json::json!(epoch));
    }
    let receipt_value = match &sealed {
        Ok(r) => {
            problem.extensions.insert("receipt".into(), r.value.clone());
            receipt_header(r)
        }
        Err(e) => {
            tracing::error!(error = %e, "rejection receipt not stored");
            None
        }
    };
    let mut resp = problem.into_response();
    if let Some(v) = receipt_value {
        resp.headers_mut().insert(RECEIPT_HEADER, v);
    }
    if let Some(epoch) = current_epoch {
        resp.headers_mut()
            .insert(FENCE_HEADER, HeaderValue::from(epoch));
    }
    resp
}
