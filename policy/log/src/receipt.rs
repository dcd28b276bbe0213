//! Receipts (SPEC §5.5). A receipt (`receipt_version` "2.0") is an entry of the receipt log
//! ([the log](crate)): its JCS is the leaf, and the checkpoint that covers it is what is signed;
//! [`entry`] makes one, and the store's batch seals it ([`crate::seal`]).
//!
//! Before the log, receipts (version 1.0) were each signed by the sidecar key over their JCS
//! without `signature`, and chained: `prev` is `sha256:` + SHA-256 of the JCS of the previous
//! receipt *with* its signature. Stores keep the retained part of such a chain from before an
//! upgrade; [`verify_chain_from`] walks it and names the first receipt that breaks it.
//!
//! No receipt ever holds a request or response body, only digests of them; the types here have
//! no field that could carry one.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;
use serde_json::{json, Value};

use palisade_core::canon;
use palisade_core::digest::Sha256Digest;
use palisade_core::json;
use palisade_core::keys::{KeyPair, TrustStore};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiptKind {
    Commit,
    Rejection,
    Compensation,
    DryRun,
    Escrow,
    /// A forwarded MCP tool call answered with an interim outcome (`input_required`, RICH
    /// §3.2): sent, but not complete, so not a commit (SPEC §7). Our addition to §5.5's kinds.
    Interim,
    /// An AIP-2.1 quote-channel message delivered to the agent behind the sidecar (SPEC §13):
    /// no lease, no SoR write; its `request_digest` is the message's. Our addition too.
    Delivery,
    /// SPEC §9: an operator approved or rejected a held write (`outcome` `approved` or
    /// `rejected`), naming the `approver` and the `escrow_id`.
    Approval,
    /// SPEC §14: an operator's freeze made or lifted (`outcome` `frozen` or `unfrozen`),
    /// naming who (`by`) and the freeze (`freeze_id`).
    Freeze,
}

/// The unsigned content of a receipt. Optional members are left out when absent.
#[derive(Debug, Clone, Serialize)]
pub struct ReceiptBody {
    pub receipt_id: String,
    pub kind: ReceiptKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sor_target_uri: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cas_fence_epoch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The operation in the budgets' key form (`PUT /api/v2/items/{id}`,
    /// `mcp:tool/create_order`): what audit export's `operation=` matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_image_state_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    /// The refusal code, on rejections only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// e.g. `"uncertain"` for an upstream timeout, `"dry-run"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lockfile_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_anchor_ref: Option<String>,
    /// Who acted, as admission knows them (SPEC §13): `sub:sha256:…`, a digest of the token's
    /// issuer and subject, never the token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// The connection a request went through (RICH §9, issue 23): the contract the agent
    /// addressed, the one the SoR received, and the connectors between them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connector: Option<ConnectorRef>,
    /// The synthesized contract a write ran under (AGTP-RCNS, seed 000 §3.1: the
    /// Attribution-Record's `synthesis_id`, `contract_hash`, `negotiation_origin`), as
    /// top-level members.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// A `freeze` entry's: who made or lifted it (SPEC §14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A `freeze` entry's, and a write it refused: the freeze's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freeze_id: Option<String>,
    /// An `approval` entry's: who decided, on which escrow (SPEC §9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub escrow_id: Option<String>,
    /// An `approval` entry's: the operator's reason, as they wrote it (at most 280 characters;
    /// an operator's words, never a payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The operator's rule that decided the write (SPEC §15): a `deny`'s rejection, a held
    /// write's receipts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// SHA-256 of the operator's rules file in force, whenever rules are configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules_digest: Option<String>,
    /// Rules in report mode that matched the write: what each would have done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules_report: Option<Vec<RuleReport>>,
    /// RFC 3339.
    pub at: String,
}

/// A report-mode rule that matched (SPEC §15): its name and the action it would have taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleReport {
    pub rule: String,
    pub would: String,
}

/// A receipt's RCNS attribution members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attribution {
    pub synthesis_id: String,
    pub contract_hash: String,
    pub negotiation_origin: String,
    /// Which step of the composition (0-based); absent on the invocation's own receipt.
    #[serde(rename = "rcns_step", skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
}

/// A receipt's `connector` member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectorRef {
    pub source_contract_digest: String,
    pub target_contract_digest: String,
    pub connector_digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_connector_digest: Option<String>,
}

impl ReceiptBody {
    /// A receipt with only the required members; fill the rest with struct update syntax.
    pub fn new(receipt_id: String, kind: ReceiptKind, at: String) -> Self {
        Self {
            receipt_id,
            kind,
            lease_id: None,
            sor_target_uri: None,
            cas_fence_epoch: None,
            method: None,
            operation: None,
            request_digest: None,
            pre_image_state_hash: None,
            upstream_status: None,
            code: None,
            outcome: None,
            lockfile_digest: None,
            trace_id: None,
            trace_anchor_ref: None,
            caller: None,
            connector: None,
            attribution: None,
            by: None,
            freeze_id: None,
            approver: None,
            escrow_id: None,
            reason: None,
            rule: None,
            rules_digest: None,
            rules_report: None,
            at,
        }
    }
}

/// A receipt as an entry of the log: its JSON and its JCS (the bytes the leaf hash is over).
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    pub jcs: Vec<u8>,
}

/// Most bytes of an entry: an entry bundle's length prefix is a uint16 (C2SP tlog-tiles).
pub const MAX_ENTRY: usize = u16::MAX as usize;

/// Why a receipt cannot be an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a receipt of {0} bytes is larger than an entry may be ({MAX_ENTRY})")]
pub struct TooLarge(pub usize);

/// The receipt `body` as a log entry (`receipt_version` "2.0", SPEC §5.5): no `prev` and no
/// signature of its own; the checkpoint that covers it is what is signed.
pub fn entry(body: &ReceiptBody) -> Result<Entry, TooLarge> {
    let mut value = serde_json::to_value(body).unwrap_or_else(|_| json!({}));
    if let Some(obj) = value.as_object_mut() {
        obj.insert("receipt_version".into(), json!("2.0"));
    }
    let jcs = canon::to_vec(&value);
    if jcs.len() > MAX_ENTRY {
        return Err(TooLarge(jcs.len()));
    }
    Ok(Entry { value, jcs })
}

/// A receipt integrated into the log, as the client gets it.
#[derive(Debug, Clone)]
pub struct SealedReceipt {
    /// The envelope `{receipt, index, inclusion, checkpoint}`: what every surface hands out.
    pub value: Value,
    /// The entry's index in the log.
    pub index: u64,
    /// The entry's bytes (the receipt's JCS).
    pub entry: Vec<u8>,
}

impl SealedReceipt {
    /// The receipt itself (the envelope's `receipt`).
    pub fn receipt(&self) -> &Value {
        &self.value["receipt"]
    }
}

/// A version 1.0 receipt (signed on its own, chained by `prev`): what stores wrote before the
/// receipt log. Stores keep and verify the retained part of such a chain; nothing writes one.
#[cfg(test)]
pub(crate) struct V1Receipt {
    pub value: Value,
    pub jcs: Vec<u8>,
    pub digest: Sha256Digest,
}

/// Signs `body` as the version 1.0 receipt following `prev` (tests of the v1 verifier).
#[cfg(test)]
pub(crate) fn seal_v1(body: &ReceiptBody, prev: Sha256Digest, key: &KeyPair) -> V1Receipt {
    let mut value = serde_json::to_value(body).expect("a receipt body always serialises");
    let obj = value
        .as_object_mut()
        .expect("a receipt body serialises as an object");
    obj.insert("receipt_version".into(), json!("1.0"));
    obj.insert("prev".into(), json!(prev.to_string()));
    let sig = key.sign(&canon::to_vec(&Value::Object(obj.clone())));
    obj.insert(
        "signature".into(),
        json!({"alg": "Ed25519", "kid": key.kid(), "sig": URL_SAFE_NO_PAD.encode(sig)}),
    );
    let jcs = canon::to_vec(&value);
    let digest = Sha256Digest::of(&jcs);
    V1Receipt { value, jcs, digest }
}

/// What is wrong with a receipt in a chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainFault {
    #[error("not a JSON object of I-JSON")]
    Unparseable,
    #[error("missing or malformed member {0}")]
    Malformed(&'static str),
    #[error("prev does not match the digest of the previous receipt")]
    BrokenLink,
    #[error("signed by a key that is not trusted")]
    UnknownKey,
    #[error("signature does not verify")]
    BadSignature,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("receipt #{index} ({}) breaks the chain: {fault}", receipt_id.as_deref().unwrap_or("no receipt_id"))]
pub struct ChainError {
    /// 0-based position in the chain.
    pub index: usize,
    pub receipt_id: Option<String>,
    pub fault: ChainFault,
}

/// A verified chain: how many receipts, and the digest the next receipt's `prev` must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    pub count: usize,
    pub head: Sha256Digest,
}

/// Verifies one receipt (its signature) and returns its `prev` link and its own digest.
pub fn verify_one(
    bytes: &[u8],
    trust: &TrustStore,
) -> Result<(Sha256Digest, Sha256Digest), (Option<String>, ChainFault)> {
    let tree = json::parse_tree(bytes, 32).map_err(|_| (None, ChainFault::Unparseable))?;
    let json::Node::Object(members) = &tree else {
        return Err((None, ChainFault::Unparseable));
    };
    let value = tree.to_value();
    let Value::Object(obj) = &value else {
        return Err((None, ChainFault::Unparseable));
    };
    let id = obj
        .get("receipt_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let fail = |fault| (id.clone(), fault);
    let prev = obj
        .get("prev")
        .and_then(Value::as_str)
        .and_then(|s| Sha256Digest::parse_ptcl(s).ok())
        .ok_or_else(|| fail(ChainFault::Malformed("prev")))?;
    let sig = obj
        .get("signature")
        .and_then(Value::as_object)
        .ok_or_else(|| fail(ChainFault::Malformed("signature")))?;
    let kid = sig
        .get("kid")
        .and_then(Value::as_str)
        .ok_or_else(|| fail(ChainFault::Malformed("signature.kid")))?;
    let raw_sig: [u8; 64] = sig
        .get("sig")
        .and_then(Value::as_str)
        .and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| fail(ChainFault::Malformed("signature.sig")))?;
    if sig.get("alg").and_then(Value::as_str) != Some("Ed25519") {
        return Err(fail(ChainFault::Malformed("signature.alg")));
    }
    let key = trust.get(kid).ok_or_else(|| fail(ChainFault::UnknownKey))?;
    let mut full = Vec::with_capacity(bytes.len());
    let cut = canon::write_members_noting(&mut full, members, Some("signature"))
        .expect("the signature member was found above");
    if !key.verify(&canon::without(&full, cut), &raw_sig) {
        return Err(fail(ChainFault::BadSignature));
    }
    Ok((prev, Sha256Digest::of(&full)))
}

/// Walks a whole chain from its first receipt: every `prev` link and every signature.
pub fn verify_chain<'a>(
    receipts: impl IntoIterator<Item = &'a [u8]>,
    trust: &TrustStore,
) -> Result<ChainHead, ChainError> {
    verify_chain_from(receipts, trust, Sha256Digest::empty())
}

/// Walks the retained part of a chain whose first receipt's `prev` must be `start` (the
/// digest of the last receipt removed under retention).
pub fn verify_chain_from<'a>(
    receipts: impl IntoIterator<Item = &'a [u8]>,
    trust: &TrustStore,
    start: Sha256Digest,
) -> Result<ChainHead, ChainError> {
    let mut expected_prev = start;
    let mut count = 0;
    for (index, bytes) in receipts.into_iter().enumerate() {
        let (prev, digest) =
            verify_one(bytes, trust).map_err(|(receipt_id, fault)| ChainError {
                index,
                receipt_id,
                fault,
            })?;
        if prev != expected_prev {
            return Err(ChainError {
                index,
                receipt_id: json::parse(bytes, 32)
                    .ok()
                    .and_then(|v| v.get("receipt_id")?.as_str().map(str::to_owned)),
                fault: ChainFault::BrokenLink,
            });
        }
        expected_prev = digest;
        count += 1;
    }
    Ok(ChainHead {
        count,
        head: expected_prev,
    })
}

/// Fuzzing entry point: treat `data` as newline-separated stored receipts.
#[doc(hidden)]
pub fn fuzz_verify_chain(data: &[u8]) {
    let mut trust = TrustStore::new();
    let key = KeyPair::from_seed([1; 32]);
    let _ = trust.insert(key.trusted("fuzz"));
    let _ = verify_chain(data.split(|b| *b == b'\n'), &trust);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize, key: &KeyPair) -> Vec<V1Receipt> {
        let mut prev = Sha256Digest::empty();
        (0..n)
            .map(|i| {
                let body = ReceiptBody {
                    lease_id: Some(format!("urn:uuid:{i}")),
                    cas_fence_epoch: Some(i as u64 + 1),
                    upstream_status: Some(200),
                    ..ReceiptBody::new(
                        format!("urn:uuid:r{i}"),
                        ReceiptKind::Commit,
                        "2026-12-02T00:00:00.000Z".into(),
                    )
                };
                let r = seal_v1(&body, prev, key);
                prev = r.digest;
                r
            })
            .collect()
    }

    fn trust(key: &KeyPair) -> TrustStore {
        let mut t = TrustStore::new();
        t.insert(key.trusted("sidecar")).unwrap();
        t
    }

    #[test]
    fn a_sealed_chain_verifies() {
        let key = KeyPair::from_seed([1; 32]);
        let receipts = chain(5, &key);
        let head = verify_chain(receipts.iter().map(|r| r.jcs.as_slice()), &trust(&key)).unwrap();
        assert_eq!(head.count, 5);
        assert_eq!(head.head, receipts[4].digest);
        assert_eq!(receipts[0].value["prev"], Sha256Digest::empty().to_string());
        assert_eq!(receipts[0].value["receipt_version"], "1.0");
        assert_eq!(receipts[0].value["kind"], "commit");
    }

    #[test]
    fn the_first_broken_receipt_is_named() {
        let key = KeyPair::from_seed([1; 32]);
        let t = trust(&key);
        let receipts = chain(4, &key);
        let mut bytes: Vec<Vec<u8>> = receipts.iter().map(|r| r.jcs.clone()).collect();

        // A receipt removed from the middle breaks the next link.
        let mut gap = bytes.clone();
        gap.remove(1);
        let err = verify_chain(gap.iter().map(Vec::as_slice), &t).unwrap_err();
        assert_eq!((err.index, err.fault.clone()), (1, ChainFault::BrokenLink));
        assert_eq!(err.receipt_id.as_deref(), Some("urn:uuid:r2"));

        // An edited field breaks that receipt's signature.
        let edited = String::from_utf8(bytes[2].clone())
            .unwrap()
            .replace("\"cas_fence_epoch\":3", "\"cas_fence_epoch\":9");
        bytes[2] = edited.into_bytes();
        let err = verify_chain(bytes.iter().map(Vec::as_slice), &t).unwrap_err();
        assert_eq!((err.index, err.fault), (2, ChainFault::BadSignature));

        // A receipt signed by another key is not trusted.
        let other = chain(1, &KeyPair::from_seed([2; 32]));
        let err = verify_chain([other[0].jcs.as_slice()], &t).unwrap_err();
        assert_eq!((err.index, err.fault), (0, ChainFault::UnknownKey));

        let err = verify_chain([b"not json".as_slice()], &t).unwrap_err();
        assert_eq!(err.fault, ChainFault::Unparseable);
    }
}
