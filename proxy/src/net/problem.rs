//! Turns refusals and failures into RFC 9457 `application/problem+json` responses (SPEC §6).
//!
//! The code table in `palisade_policy::codes` fixes status, title and `type`; this file only
//! renders. `detail` comes from policy and names fields and rules, never request values.

use http::{header, Response, StatusCode};
use palisade_policy::{ErrorCode, Refusal};
use serde_json::{json, Map, Value};

use crate::net::body::{self, ProxyBody};

/// A new request id for a problem's `instance`.
pub fn new_instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A problem document about to be sent.
#[derive(Debug, Clone)]
pub struct Problem {
    pub code: ErrorCode,
    pub status: u16,
    pub detail: String,
    pub reason: Option<&'static str>,
    /// Request id (`instance`).
    pub instance: String,
    pub trace_id: String,
    /// Extension members (`current_epoch`, `receipt`, …).
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(code: ErrorCode, detail: impl Into<String>, instance: &str, trace_id: &str) -> Self {
        Self {
            code,
            status: code.status(),
            detail: detail.into(),
            reason: None,
            instance: instance.to_owned(),
            trace_id: trace_id.to_owned(),
            extensions: Map::new(),
        }
    }

    pub fn from_refusal(r: &Refusal, instance: &str, trace_id: &str) -> Self {
        let mut p = Self {
            status: r.status(),
            reason: r.reason,
            ..Self::new(r.code, r.detail.to_string(), instance, trace_id)
        };
        if let Some(at) = &r.location {
            p.extensions
                .insert("violationLocation".into(), Value::String(at.clone()));
        }
        p
    }

    /// The sidecar's own answer with a fresh `instance`: a failure, or a refusal that is
    /// answered but not recorded (a path that names nothing, a flood past its first refusal).
    pub fn answer(code: ErrorCode, detail: impl Into<String>, trace_id: &str) -> Self {
        Self::new(code, detail, &new_instance(), trace_id)
    }

    /// An answer of the admin API, which no trace context reaches: a fresh trace id too.
    pub fn untraced(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::answer(code, detail, &uuid::Uuid::new_v4().simple().to_string())
    }

    /// A policy refusal with a fresh `instance`, not recorded: the one refusal path
    /// (`enforce::receipts::record`) renders recorded ones.
    pub fn of_refusal(r: &Refusal, trace_id: &str) -> Self {
        Self::from_refusal(r, &new_instance(), trace_id)
    }

    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "type": self.code.problem_type(),
            "title": self.code.title(),
            "status": self.status,
            "code": self.code.as_str(),
            "detail": self.detail,
            "instance": self.instance,
            "trace_id": self.trace_id,
        });
        let obj = doc.as_object_mut().expect("literal object");
        if let Some(reason) = self.reason {
            obj.insert("reason".into(), json!(reason));
        }
        for (k, v) in &self.extensions {
            obj.insert(k.clone(), v.clone());
        }
        doc
    }

    /// The response; its code also travels in the response's extensions (never on the
    /// wire), so a stage that made it can tell the sidecar's problem from an upstream's
    /// without reading the body back.
    pub fn into_response(self) -> Response<ProxyBody> {
        let code = self.code;
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut resp = Response::new(body::full(body));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/problem+json"),
        );
        resp.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        resp.extensions_mut().insert(code);
        resp
    }
}
