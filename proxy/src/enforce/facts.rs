//! What the checks read from a write, whatever protocol carried it: the lease and inverse as
//! carried ([`Carried`]), the target and body ([`WriteFacts`]), the sender ([`Requester`]).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{header, HeaderValue};
use palisade_policy::lease::{self};
use palisade_policy::{target, ErrorCode, Refusal};

use crate::config::Config;
use crate::net::conn::ConnInfo;
use crate::net::headers::{INVERSE_HEADER, LEASE_HEADER};

/// A lease or inverse as the write carried it.
pub enum Carried<'a> {
    /// An HTTP header: the lease as base64url or raw JSON, the inverse as base64url.
    Header(&'a HeaderValue),
    /// A JSON document already (MCP `params._meta`).
    Json(Vec<u8>),
}

impl Carried<'_> {
    pub(super) fn lease_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, Refusal> {
        match self {
            Carried::Header(v) => Ok(std::borrow::Cow::Owned(
                lease::decode_header(v.as_bytes())?.into_owned(),
            )),
            Carried::Json(b) => Ok(std::borrow::Cow::Borrowed(b)),
        }
    }

    pub(super) fn inverse_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, Refusal> {
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
    /// `input` as parsed already by the stage that read it (a tool call's `arguments`, an
    /// HTTP body that admission or a connection read): check 9 does not parse it again.
    pub parsed: Option<&'a serde_json::Value>,
    /// The whole request as sent (its digest goes into the receipt).
    pub body: &'a [u8],
    /// The path and query, recorded with the lease (and GET for check 12 on HTTP).
    pub path: &'a str,
    /// The request's headers, for check 12's GET; `None` skips check 12 (an MCP tool call
    /// has no representation to fetch, SPEC §5.2).
    pub headers: Option<&'a http::HeaderMap>,
    /// A lease the sidecar grants this write itself, at check time (an RCNS step); then
    /// `lease` and `inverse` are not read.
    pub granted: Option<InProcessGrant>,
    /// The write as its inverse must undo it (SPEC §5.4); a tool's declared inverse is filled
    /// in from the binding by the checks.
    pub undoes: palisade_policy::inverse::Undoes<'a>,
}

/// A lease the sidecar grants in process, at check time (an RCNS step, issue 35): to whom,
/// in which mode, for how long, naming which inverse. Its epoch and pre-image are read under
/// the resource's lock with the write's own, so the grant costs no fetch, no signature check
/// and no store job of its own.
#[derive(Debug, Clone)]
pub struct InProcessGrant {
    pub lease_id: String,
    pub caller: String,
    pub mode: lease::RecoveryMode,
    pub window_ms: u64,
    pub inverse: palisade_policy::inverse::InversePayload,
}

impl<'a> WriteFacts<'a> {
    /// The write an inverse must undo (SPEC §5.4): [`WriteFacts::undoes`], with a tool's
    /// declared inverse read from the contract that binds it.
    pub(crate) fn undoes_for(
        &self,
        binding: &crate::context::Binding<'a>,
    ) -> palisade_policy::inverse::Undoes<'a> {
        use palisade_policy::inverse::Undoes;
        match self.undoes {
            Undoes::Tool { name, .. } => Undoes::Tool {
                name,
                declared: binding
                    .capability()
                    .and_then(|c| c.contract.inverse_tool.as_deref()),
            },
            http => http,
        }
    }

    /// An HTTP write's method (a tool call has none).
    pub(crate) fn http_method(&self) -> Option<&'a str> {
        match self.undoes {
            palisade_policy::inverse::Undoes::Http { method, .. } => method,
            palisade_policy::inverse::Undoes::Tool { .. } => None,
        }
    }

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
            parsed: None,
            body,
            path,
            headers: Some(&parts.headers),
            granted: None,
            undoes: palisade_policy::inverse::Undoes::Http {
                method: Some(parts.method.as_str()),
                path: parts.uri.path(),
            },
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
            caller: conn.caller(parts),
        }
    }
}

/// The resource key of a read (SPEC §5.3: a fenced read carries the resource's epoch): the
/// write path's `resource_key(request_target(origin, path))`, computed from the connection's
/// normalised origin and the canonical path when the origin is plain, so the common read
/// pays no URL parse (issue 19).
pub(crate) fn read_resource_key(
    config: &Config,
    parts: &http::request::Parts,
    conn: &ConnInfo,
) -> Option<String> {
    use palisade_policy::target;
    let origin = origin(config, parts, conn)?;
    if target::is_plain_origin(&origin) {
        let fast = conn
            .normalized_origin(&origin)
            .and_then(|o| target::fast_resource_key(&o, parts.uri.path()));
        if fast.is_some() {
            return fast;
        }
    }
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    target::request_target(&origin, pq)
        .ok()
        .map(|t| target::resource_key(&t).to_owned())
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
    let host = match parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        Some(h) => h,
        None => parts.uri.authority()?.as_str(),
    };
    // Pushed, not `format!`ed: every fenced read takes this path (issue 19, ≈ 600
    // instructions and an allocation fewer).
    let scheme = if conn.tls { "https://" } else { "http://" };
    let mut origin = String::with_capacity(scheme.len() + host.len());
    origin.push_str(scheme);
    origin.push_str(host);
    Some(origin)
}
