//! The HTTP surface of the write engine (SPEC §5): an enforced write whose body has been read.
//!
//! ```text
//! bound and read-only (sideEffect read)?  its input contract and parameters, then forwarded
//! otherwise                               engine::run with the HTTP leg:
//!   lease and inverse from Agent-Compensation-Lease / -Inverse (or granted in process),
//!   Idempotency-Key from its header, judged by method, target and body,
//!   refusals as problem+json, holds answered 202, delivery by send::forward
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use serde_json::Value;

use crate::context::{Binding, Enforcement, Outcome, Plane, Recorder, Routed, WriteContext};
use crate::enforce::delivery::Delivery;
use crate::enforce::engine::{self, KeyRequest, Leg, Write};
use crate::enforce::escrow;
use crate::enforce::facts::{InProcessGrant, Requester, WriteFacts};
use crate::enforce::forward::forward_plain;
use crate::enforce::permit::Denied;
use crate::enforce::receipts;
use crate::enforce::send;
use crate::enforce::written::Written;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use palisade_rich::{Bundle, SideEffect};

/// An enforced HTTP write whose body has been read.
pub(crate) struct WriteRequest {
    /// The request in its canonical form: what is checked and what the SoR receives.
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub cx: WriteContext,
    /// The bundle version the pipeline loaded: it decides this request from admission to end.
    pub bundle: Option<Arc<Bundle>>,
    /// Where the request was routed in `bundle`, by the stage that made it.
    pub routed: Routed,
    /// A lease the sidecar grants the write itself (an RCNS step); `None`: the write carries
    /// its own in `Agent-Compensation-Lease`.
    pub grant: Option<InProcessGrant>,
    /// `body` as a stage before parsed it (admission, a connection, an RCNS step that built
    /// it), so that no later check parses it again; `None`: check 9 parses it if its contract
    /// has an input schema.
    pub input: Option<Value>,
}

/// An enforced write whose body has been read: what it came to ([`Written`]).
pub(crate) async fn run(
    plane: &Arc<Plane>,
    enf: &Arc<Enforcement>,
    conn: &Arc<ConnInfo>,
    req: WriteRequest,
) -> Written {
    let WriteRequest {
        parts,
        body: bytes,
        mut cx,
        bundle,
        routed,
        grant,
        input,
    } = req;
    // The engine and the delivery read the binding from the route the request came with.
    let leg = HttpLeg { routed, input };
    let binding = leg.routed.binding(bundle.as_deref());
    cx.bind(bundle.as_deref(), &binding);
    if let Some(cap) = binding.capability() {
        // A bound operation that only reads needs no lease (its sideEffect says so); its
        // input contract still holds.
        if cap.contract.side_effect == SideEffect::Read {
            let checked = match &leg.input {
                Some(v) => palisade_rich::check_input_value(&cap.contract, v),
                None => palisade_rich::check_input(
                    &cap.contract,
                    &bytes,
                    plane.config.limits.max_json_depth,
                ),
            }
            .and_then(|()| {
                palisade_rich::check_parameters(
                    cap,
                    parts.uri.path(),
                    parts.uri.query(),
                    &crate::net::headers::values(&parts.headers),
                )
            });
            if let Err(refusal) = checked {
                return leg
                    .refuse(plane.recorder(), refusal.into(), &cx, &parts, &bytes)
                    .await;
            }
            return match forward_plain(plane, parts, body::full(bytes), conn, &cx, None).await {
                Ok(resp) => Written::plain(resp, Outcome::Forwarded),
                Err(own) => Written::own(own),
            };
        }
    }
    let w = Write {
        parts,
        body: bytes,
        cx,
        bundle,
        grant,
        leg,
    };
    engine::run(plane, enf, conn, w).await
}

/// An HTTP write: PTCL headers in, problem+json out.
pub(crate) struct HttpLeg {
    routed: Routed,
    /// The body as parsed before the engine (see [`WriteRequest::input`]).
    input: Option<Value>,
}

impl HttpLeg {
    /// The leg of a write to `parts`' method and path, routed through `bundle`.
    pub(crate) fn of(bundle: Option<&Bundle>, parts: &http::request::Parts) -> Self {
        Self {
            routed: Routed::of(bundle, &parts.method, parts.uri.path()),
            input: None,
        }
    }
}

impl Leg for HttpLeg {
    fn routed(&self) -> Routed {
        self.routed
    }

    fn facts<'a>(
        &'a self,
        parts: &'a http::request::Parts,
        body: &'a [u8],
        _binding: &Binding<'_>,
        who: &Requester,
    ) -> WriteFacts<'a> {
        WriteFacts {
            parsed: self.input.as_ref(),
            ..WriteFacts::http(parts, body, who)
        }
    }

    fn key<'a>(&'a self, parts: &'a http::request::Parts, body: &'a [u8]) -> KeyRequest<'a> {
        KeyRequest {
            headers: Cow::Borrowed(&parts.headers),
            method: parts.method.clone(),
            target: Cow::Borrowed(parts.uri.path_and_query().map_or("/", |p| p.as_str())),
            body: Cow::Borrowed(body),
        }
    }

    /// The lockfile's operation, or `METHOD <canonical path>` for an unbound write.
    fn shape<'a>(
        &'a self,
        parts: &'a http::request::Parts,
        body: &'a [u8],
    ) -> crate::enforce::verdict::Shape<'a> {
        crate::enforce::verdict::Shape::Http {
            method: parts.method.as_str(),
            target: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
            headers: &parts.headers,
            body,
        }
    }

    fn operation_key(&self, parts: &http::request::Parts, binding: &Binding<'_>) -> String {
        match binding.capability() {
            Some(c) => c.operation.clone(),
            None => format!("{} {}", parts.method, parts.uri.path()),
        }
    }

    async fn refuse(
        &self,
        rec: Recorder<'_>,
        denied: Denied,
        cx: &WriteContext,
        parts: &http::request::Parts,
        body: &[u8],
    ) -> Written {
        Written::refused(receipts::refuse_write(rec, parts, denied, cx, body).await)
    }

    async fn replay(&self, resp: Response<ProxyBody>, receipt: Option<Value>) -> Written {
        Written::with_receipt(resp, Outcome::Replayed, receipt)
    }

    fn hold_answer(&self) -> escrow::Answer {
        escrow::Answer::Http
    }

    async fn deliver(self, plane: Arc<Plane>, enf: Arc<Enforcement>, d: Delivery) -> Written {
        let bundle = d.bundle.clone();
        let cap = self.routed.binding(bundle.as_deref()).capability();
        send::forward(&plane, &enf, d, cap).await
    }
}
