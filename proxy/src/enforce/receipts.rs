//! What a decided write leaves behind: the commit receipt of a permitted one, and for a
//! refused one problem+json with its signed rejection receipt and a drift event (SPEC §5.5, §8).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{HeaderValue, Response};
use palisade_policy::drift::{DriftEvent, EventContext};
use palisade_policy::lease::{self};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind, SealedReceipt};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{Enforcement, Recorder, WriteContext};
use crate::enforce::permit::{Denied, Permit};
use crate::net::body::ProxyBody;
use crate::net::headers::{self, DRY_RUN_HEADER, FENCE_HEADER, RECEIPT_HEADER};
use crate::net::identity::Mismatch;
use crate::net::problem::Problem;
use crate::store::Attachments;

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

/// The `outcome` of a tool call answered with an interim result: its receipt is of kind
/// `interim`, not `commit`, and its lease is left with nothing to compensate (SPEC §7).
pub const INTERIM: &str = "interim";

/// The `outcome` of a write the SoR refused on its `If-Match` (412, `upstream.if_match`): its
/// receipt is a rejection naming `ERR_STALE_PRE_IMAGE_UPSTREAM`; nothing was written.
pub const PRECONDITION_FAILED: &str = "precondition-failed";

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
        Some(PRECONDITION_FAILED) => ReceiptKind::Rejection,
        _ => ReceiptKind::Commit,
    };
    let (code, upstream_status) = match outcome {
        Some(PRECONDITION_FAILED) => (
            Some(ErrorCode::StalePreImageUpstream.as_str().to_owned()),
            412,
        ),
        _ => (None, resp.status().as_u16()),
    };
    let body = ReceiptBody {
        outcome: if dry_run {
            Some("dry-run".to_owned())
        } else {
            outcome.map(str::to_owned)
        },
        upstream_status: Some(upstream_status),
        code,
        ..permit_receipt(enf, &permit, cx, kind)
    };
    let attachments = attach(resp);
    let appended = enf.seal(body, attachments).await;
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
            metrics::counter!(crate::telemetry::RECEIPTS_NOT_STORED).increment(1);
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
        operation: cx.operation_key.clone(),
        request_digest: Some(permit.request_digest.to_string()),
        pre_image_state_hash: permit.pre_image.map(|d| d.to_string()),
        trace_id: Some(cx.trace_id.to_string()),
        trace_anchor_ref: l.trace_anchor_ref.map(|d| d.to_string()),
        lockfile_digest: cx.lockfile_digest.clone(),
        caller: cx.caller.clone(),
        connector: cx.connector.clone(),
        attribution: cx.attribution.clone(),
        rules_digest: cx.rules_digest.clone(),
        rules_report: Some(permit.ruled().report.clone()).filter(|r| !r.is_empty()),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            kind,
            enf.now_rfc3339(),
        )
    }
}

/// What a refusal is recorded with besides its code.
#[derive(Default)]
pub struct Evidence<'a> {
    /// The lease the request carried (as a document): its `lease_id` goes into the receipt,
    /// and it is the drift event's evidence unless something below is.
    pub lease: Option<&'a [u8]>,
    /// The request body: a contract or connector refusal's evidence.
    pub body: Option<&'a [u8]>,
    /// The resource's epoch, when the fence refused (checks 11–12): `current_epoch` and
    /// `Agent-Fence-Token` on the answer, the receipt's epoch.
    pub current_epoch: Option<u64>,
    /// Check 12's GET met another deployment identity: the peer, for the drift event.
    pub peer: Option<&'a Mismatch>,
    /// Members a protocol adds to the problem beside ours (AIP-2.1's `accepted` and
    /// `reason`, admission's `authorization_details`, RCNS's `lock`).
    pub extra: Vec<(String, serde_json::Value)>,
}

impl<'a> Evidence<'a> {
    /// Only protocol members.
    pub fn with_extra(extra: &[(&str, serde_json::Value)]) -> Self {
        Self {
            extra: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..Self::default()
        }
    }
}

/// A refusal, recorded: counted in `palisade_refusals_total`, its rejection receipt in the
/// chain (when enforcement keeps one and the store took it), its drift event emitted. What
/// every surface renders once, in its own wire form: problem+json ([`Refused::into_response`]),
/// a JSON-RPC error whose data is [`Refused::problem`], an escrow's refused record, an RCNS
/// step's failure. Nothing reads a receipt back out of a rendered answer.
#[derive(Debug)]
pub struct Refused {
    pub refusal: Refusal,
    /// The rejection receipt's JSON, when it was stored.
    pub receipt: Option<serde_json::Value>,
    pub current_epoch: Option<u64>,
    request_id: String,
    trace_id: std::sync::Arc<str>,
    extra: Vec<(String, serde_json::Value)>,
    /// Headers a protocol adds to the answer (admission's `WWW-Authenticate`).
    added: Vec<(http::HeaderName, HeaderValue)>,
}

impl Refused {
    /// The refusal with `name: value` on its answer, in whatever form it is rendered.
    pub fn with_header(mut self, name: http::HeaderName, value: HeaderValue) -> Self {
        self.added.push((name, value));
        self
    }

    /// The HTTP status its answer has.
    pub fn status(&self) -> http::StatusCode {
        http::StatusCode::from_u16(self.refusal.status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn code(&self) -> ErrorCode {
        self.refusal.code
    }

    /// The problem document: the refusal, its receipt, `current_epoch`, the protocol's members.
    pub fn problem(&self) -> Problem {
        let mut problem = Problem::from_refusal(&self.refusal, &self.request_id, &self.trace_id);
        for (k, v) in &self.extra {
            problem.extensions.insert(k.clone(), v.clone());
        }
        if let Some(epoch) = self.current_epoch {
            problem
                .extensions
                .insert("current_epoch".into(), serde_json::json!(epoch));
        }
        if let Some(r) = &self.receipt {
            problem.extensions.insert("receipt".into(), r.clone());
        }
        problem
    }

    /// The headers of a refusal's answer: its receipt and, from the fence, the epoch, and
    /// those the protocol added.
    pub fn headers(&self) -> Vec<(http::HeaderName, HeaderValue)> {
        let mut out = self.added.clone();
        // A write budget's refusal says when one more write fits (SPEC §14).
        let retry = self.extra.iter().find(|(k, _)| k == "retry_after");
        if let (ErrorCode::WriteBudget, Some((_, v))) = (self.refusal.code, retry) {
            if let Some(secs) = v.as_u64() {
                out.push((http::header::RETRY_AFTER, HeaderValue::from(secs)));
            }
        }
        if let Some(v) = self.receipt.as_ref().and_then(receipt_header_value) {
            out.push((http::HeaderName::from_static(RECEIPT_HEADER), v));
        }
        if let Some(epoch) = self.current_epoch {
            out.push((
                http::HeaderName::from_static(FENCE_HEADER),
                HeaderValue::from(epoch),
            ));
        }
        out
    }

    /// A refusal answered and not receipted here: a path that names nothing (not counted:
    /// a scan of made-up paths is no policy event), or one whose count, drift event and
    /// receipt its caller made ([`counted`], `output::blocked`).
    pub fn answered(refusal: Refusal, trace_id: &std::sync::Arc<str>) -> Self {
        Self {
            refusal,
            receipt: None,
            current_epoch: None,
            request_id: uuid::Uuid::new_v4().to_string(),
            trace_id: trace_id.clone(),
            extra: Vec::new(),
            added: Vec::new(),
        }
    }

    /// With protocol members beside the problem's own.
    pub fn with_extra(mut self, extra: Vec<(String, serde_json::Value)>) -> Self {
        self.extra.extend(extra);
        self
    }
}

/// A refusal counted in `palisade_refusals_total` and not receipted: past the first of a
/// rate window (a flood must not become a flood of durable writes).
pub fn counted(rec: Recorder<'_>, refusal: Refusal, cx: &WriteContext) -> Refused {
    rec.metrics.refusal(refusal.code);
    Refused::answered(refusal, &cx.trace_id)
}

/// The one refusal path: counts the refusal, stores its rejection receipt and emits its drift
/// event (when enforcement is on), and gives the [`Refused`] each surface renders.
pub async fn record(
    rec: Recorder<'_>,
    refusal: Refusal,
    cx: &WriteContext,
    evidence: Evidence<'_>,
) -> Refused {
    rec.metrics.refusal(refusal.code);
    let request_id = uuid::Uuid::new_v4().to_string();
    let receipt = match rec.enf {
        Some(enf) => keep(enf, &refusal, cx, &evidence).await,
        None => None,
    };
    Refused {
        refusal,
        receipt,
        current_epoch: evidence.current_epoch,
        request_id,
        trace_id: cx.trace_id.clone(),
        extra: evidence.extra,
        added: Vec::new(),
    }
}

/// The rejection receipt (its JSON, if stored) and the drift event of a refusal.
async fn keep(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    ev: &Evidence<'_>,
) -> Option<serde_json::Value> {
    let lease_id = ev.lease.and_then(lease_id_hint);
    let body = ReceiptBody {
        lease_id,
        method: Some(cx.method.to_string()),
        operation: cx.operation_key.clone(),
        code: Some(refusal.code.as_str().to_owned()),
        trace_id: Some(cx.trace_id.to_string()),
        cas_fence_epoch: ev.current_epoch,
        lockfile_digest: cx.lockfile_digest.clone(),
        caller: cx.caller.clone(),
        connector: cx.connector.clone(),
        attribution: cx.attribution.clone(),
        // A write a freeze stopped names the freeze (SPEC §14); one a rule denied, the rule
        // (SPEC §15).
        freeze_id: extra_str(ev, "freeze_id"),
        rule: extra_str(ev, "rule"),
        rules_digest: cx.rules_digest.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Rejection,
            enf.now_rfc3339(),
        )
    };
    let sealed = enf.seal_plain(body).await;
    let observed = match ev.peer {
        Some(m) => m.observed.clone().unwrap_or_else(|| "none".into()),
        None => cx.operation.clone(),
    };
    // A contract refusal's offending payload is the body; a peer's, its certificate; any
    // other's, the lease.
    let evidence = match ev.peer {
        Some(m) => Some(m.certificate.clone()),
        None if matches!(
            refusal.code,
            ErrorCode::ContractInput
                | ErrorCode::ConnectorFailed
                | ErrorCode::ConnectorPostcondition
        ) =>
        {
            ev.body.map(<[u8]>::to_vec)
        }
        None => ev.lease.map(<[u8]>::to_vec),
    };
    if let Some(mut event) = DriftEvent::for_refusal(
        refusal,
        EventContext {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: enf.now_rfc3339(),
            trace_id: cx.trace_id.to_string(),
            observed_identifier: Some(observed),
            binding_id: cx.binding_id.clone(),
            // A connector's refusal is about the connector the lockfile pinned.
            expected_digest: match (&cx.connector, refusal.code) {
                (Some(c), ErrorCode::ConnectorFailed | ErrorCode::ConnectorPostcondition) => {
                    Some(c.connector_digest.clone())
                }
                _ => cx.contract_digest.clone(),
            },
            evidence,
            caller: cx.caller.clone(),
        },
    ) {
        // A rule's refusal names the rule (its detail is the operator's reason).
        if let Some(rule) = extra_str(ev, "rule") {
            event.diagnostics.insert("rule".into(), rule.into());
        }
        if let Some(m) = ev.peer {
            event
                .diagnostics
                .insert("expectedIdentity".into(), m.expected.clone().into());
            event
                .diagnostics
                .insert("operation".into(), cx.operation.clone().into());
        }
        enf.drift.emit(&event);
    }
    match sealed {
        Ok(r) => Some(r.value),
        Err(e) => {
            tracing::error!(error = %e, "rejection receipt not stored");
            None
        }
    }
}

/// A text member the refusal carries beside the problem's own (`freeze_id`, `rule`).
fn extra_str(ev: &Evidence<'_>, key: &str) -> Option<String> {
    ev.extra
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_str().map(str::to_owned))
}

/// The lease document an HTTP write carried in `Agent-Compensation-Lease`, for its refusal's
/// receipt and evidence.
pub(crate) fn carried_lease(headers: &http::HeaderMap) -> Option<Vec<u8>> {
    headers
        .get(headers::LEASE_HEADER)
        .and_then(|v| palisade_policy::lease::decode_header(v.as_bytes()).ok())
        .map(std::borrow::Cow::into_owned)
}

/// A refused check, recorded ([`record`]) with the lease and body it came with.
pub(crate) async fn refuse_denied(
    rec: Recorder<'_>,
    denied: Denied,
    cx: &WriteContext,
    lease: Option<&[u8]>,
    body: Option<&[u8]>,
) -> Refused {
    let Denied {
        refusal,
        current_epoch,
        peer,
        extra,
    } = denied;
    let evidence = Evidence {
        lease,
        body,
        current_epoch,
        peer: peer.as_ref(),
        extra,
    };
    record(rec, refusal, cx, evidence).await
}

/// A refused HTTP write, recorded: the lease it carried in `Agent-Compensation-Lease` and its
/// body are the evidence.
pub(crate) async fn refuse_write(
    rec: Recorder<'_>,
    parts: &http::request::Parts,
    denied: Denied,
    cx: &WriteContext,
    body: &[u8],
) -> Refused {
    let lease = carried_lease(&parts.headers);
    refuse_denied(rec, denied, cx, lease.as_deref(), Some(body)).await
}

/// The `lease_id` of a refused lease document (which may not verify), for its receipt.
fn lease_id_hint(raw: &[u8]) -> Option<String> {
    let v = palisade_policy::json::parse(raw, lease::MAX_LEASE_DEPTH).ok()?;
    v.get("lease_id")?.as_str().map(str::to_owned)
}
