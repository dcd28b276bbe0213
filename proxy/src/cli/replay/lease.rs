//! The agent's gateway, for `palisade replay --lease-key`: a valid lease for each write.
//!
//! - **Epochs** per resource (the write's target without its query): the first write to a
//!   resource uses the wall clock in milliseconds at the start of the run, each later one the
//!   next integer, so every lease is newer than anything an earlier run left in the store.
//!   Writes to one resource are sent one at a time (a per-resource lock held until the answer),
//!   as a gateway serialises them; otherwise two in flight could reach the sidecar out of order
//!   and the replayer, not the recording, would cause the 409.
//! - **Pre-image**: unless disabled, a GET of the same path through the target just before the
//!   write, hashed as the sidecar does (SPEC §5.2 check 12). Its time counts in the write's
//!   latency: it is part of what a gateway does for each write.
//! - **Inverse**: `PUT` of the fetched representation when the resource existed (a JSON body),
//!   else (and for a POST) `DELETE` of the path; staged inline (`Agent-Compensation-Inverse`).
//! - **From the sidecar** (`--lease-from-sidecar`): instead of signing, each write's lease is
//!   granted by the target's lease endpoint (SPEC §5.7), which computes the pre-image and
//!   stages the inverse (`DELETE` of the path). Grants are bound to the caller, so the grant
//!   and the write carry the same `Authorization` (the recorded one, else
//!   [`REPLAY_AUTHORIZATION`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{header, Method, Request};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use tokio::sync::OwnedMutexGuard;

use super::har::Recorded;
use crate::net::body;
use crate::net::upstream::Upstream;

/// Methods that need a lease (SPEC §2 `ptcl.writes` default).
pub fn is_write(m: &Method) -> bool {
    matches!(
        *m,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// The `Authorization` a write gets for a granted lease when its recording had none.
pub const REPLAY_AUTHORIZATION: &str = "Bearer palisade-replay";

/// Where leases come from.
pub enum Source {
    /// Signed here with the agent's key.
    Key(Box<KeyPair>),
    /// Granted by the sidecar's lease endpoint.
    Sidecar,
}

pub struct Minter {
    source: Source,
    /// The origin the sidecar knows itself by (`listen.public_base`).
    base: String,
    fetch_pre_image: bool,
    seed: u64,
    epochs: Mutex<HashMap<String, u64>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Headers for one write, and the resource lock held until its answer.
pub struct Minted {
    pub lease: String,
    /// Sent inline; `None` when the sidecar staged it with the grant.
    pub inverse: Option<String>,
    /// `Authorization` the write must carry (the grant is bound to it).
    pub authorization: Option<String>,
    pub guard: OwnedMutexGuard<()>,
}

impl Minter {
    pub fn new(source: Source, base: String, fetch_pre_image: bool, now_ms: u64) -> Self {
        Self {
            source,
            base: base.trim_end_matches('/').to_owned(),
            fetch_pre_image,
            seed: now_ms,
            epochs: Mutex::default(),
            locks: Mutex::default(),
        }
    }

    pub async fn mint(&self, client: &Upstream, entry: &Recorded) -> Result<Minted, String> {
        let target = palisade_policy::target::request_target(&self.base, &entry.path_and_query)
            .map_err(|_| "lease-target".to_owned())?;
        let resource = palisade_policy::target::resource_key(&target).to_owned();
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(resource.clone()).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        let key = match &self.source {
            Source::Key(k) => k,
            Source::Sidecar => return self.grant(client, entry, target, guard).await,
        };
        let epoch = {
            let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
            let e = epochs.entry(resource).or_insert(self.seed);
            *e += 1;
            *e
        };
        let path = entry.path_and_query.split('?').next().unwrap_or("/");
        let (pre_image, inverse) = if self.fetch_pre_image {
            self.current(client, entry, path).await?
        } else {
            (
                Sha256Digest::empty(),
                json!({"method": "DELETE", "path": path}),
            )
        };
        let inverse_jcs = palisade_policy::canon::to_vec(&inverse);
        let fields = json!({
            "ptcl_version": "1.0",
            "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            "sor_target_uri": target,
            "recovery_mode": "COMPENSATING_ACTION",
            "t_req_ms": 1000,
            "t_granted_ms": 600_000,
            "cas_fence_epoch": epoch,
            "pre_image_state_hash": pre_image.to_string(),
            "inverse_payload_jcs_hash": Sha256Digest::of(&inverse_jcs).to_string(),
            "issued_at": palisade_policy::lease::format_rfc3339_ms(crate::clock::WallClock::now_ms()),
        });
        let signed =
            palisade_policy::lease::sign(fields.as_object().cloned().unwrap_or_default(), key);
        Ok(Minted {
            lease: URL_SAFE_NO_PAD.encode(serde_json::to_vec(&signed).unwrap_or_default()),
            inverse: Some(URL_SAFE_NO_PAD.encode(&inverse_jcs)),
            authorization: None,
            guard,
        })
    }

    /// A lease granted by the target's lease endpoint for this write.
    async fn grant(
        &self,
        client: &Upstream,
        entry: &Recorded,
        target: String,
        guard: OwnedMutexGuard<()>,
    ) -> Result<Minted, String> {
        let path = entry.path_and_query.split('?').next().unwrap_or("/");
        let authorization = entry
            .headers
            .iter()
            .find(|(n, _)| *n == header::AUTHORIZATION)
            .and_then(|(_, v)| v.to_str().ok())
            .unwrap_or(REPLAY_AUTHORIZATION)
            .to_owned();
        let body = json!({
            "sor_target_uri": target,
            "recovery_mode": "COMPENSATING_ACTION",
            "t_req_ms": 60_000,
            "inverse_payload": {"method": "DELETE", "path": path},
        });
        let uri = client
            .uri_for(crate::authority::PREFIX)
            .map_err(|_| "bad-target".to_owned())?;
        let req = Request::post(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, authorization.as_str())
            .body(body::full(body.to_string()))
            .map_err(|_| "bad-request".to_owned())?;
        let resp = client.send(req).await.map_err(|_| "grant".to_owned())?;
        let status = resp.status();
        let bytes = body::collect_limited(resp.into_body(), 1 << 20)
            .await
            .map_err(|_| "grant".to_owned())?;
        if status != http::StatusCode::CREATED {
            return Err(format!("grant-{}", status.as_u16()));
        }
        Ok(Minted {
            lease: URL_SAFE_NO_PAD.encode(&bytes),
            inverse: None,
            authorization: Some(authorization),
            guard,
        })
    }

    /// The resource's pre-image digest and the inverse that would restore it.
    async fn current(
        &self,
        client: &Upstream,
        entry: &Recorded,
        path: &str,
    ) -> Result<(Sha256Digest, Value), String> {
        let uri = client
            .uri_for(&entry.path_and_query)
            .map_err(|_| "bad-target".to_owned())?;
        let mut req = Request::get(uri);
        for (n, v) in &entry.headers {
            if *n == header::AUTHORIZATION || *n == header::COOKIE {
                req = req.header(n, v);
            }
        }
        let req = req
            .body(body::empty())
            .map_err(|_| "bad-request".to_owned())?;
        let resp = client.send(req).await.map_err(|_| "pre-image".to_owned())?;
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = body::collect_limited(resp.into_body(), 16 << 20)
            .await
            .map_err(|_| "pre-image".to_owned())?;
        let digest = palisade_policy::fence::pre_image_digest(
            &palisade_policy::fence::Fetched {
                status,
                content_type: ct.as_deref(),
                body: &bytes,
            },
            128,
        )
        .map_err(|_| "pre-image".to_owned())?;
        // A POST creates something whose name the gateway learns only from the answer: its
        // inverse here is a DELETE of the path, for the operator to review.
        let inverse = match (status, serde_json::from_slice::<Value>(&bytes)) {
            (200..=299, Ok(doc)) if entry.method != Method::POST => {
                json!({"method": "PUT", "path": path, "body": doc})
            }
            _ => json!({"method": "DELETE", "path": path}),
        };
        Ok((digest, inverse))
    }
}
