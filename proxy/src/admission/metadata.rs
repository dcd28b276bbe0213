//! `GET /.well-known/oauth-protected-resource` (RFC 9728) on the data plane: what an agent's
//! authorization request must name to be admitted here.

use http::{Response, StatusCode};
use palisade_rich::Bundle;
use serde_json::{json, Value};

use crate::context::AdmissionState;
use crate::net::body::{self, ProxyBody};

/// Where the document is served (the resource identifier's own path follows it, RFC 9728
/// §3.1; a sidecar's resource is usually an origin).
pub const PATH: &str = "/.well-known/oauth-protected-resource";

/// The metadata's URL for the configured resource identifier: the well-known path inserted
/// between its authority and its path.
pub fn url(adm: &AdmissionState) -> String {
    let resource = &adm.config.resource;
    match resource.parse::<http::Uri>() {
        Ok(u) => {
            let scheme = u.scheme_str().unwrap_or("https");
            let authority = u.authority().map_or("", |a| a.as_str());
            let path = u.path().trim_end_matches('/');
            format!("{scheme}://{authority}{PATH}{path}")
        }
        Err(_) => PATH.to_owned(),
    }
}

/// Whether `path` is the metadata document's.
pub fn is_metadata(path: &str) -> bool {
    path == PATH || path.starts_with(&format!("{PATH}/"))
}

/// The document: the resource, its authorization servers, the `rich_binding` type, and each
/// bound operation with the contract digest a grant must name and its worst-case bound (what
/// a grant without a bound would let it do).
pub fn document(adm: &AdmissionState, bundle: Option<&Bundle>) -> Value {
    let operations: Vec<Value> = bundle
        .map(|b| {
            let mut ops: Vec<Value> = b
                .capabilities
                .iter()
                .map(|c| {
                    let mut op = json!({"operation": c.operation,
                                        "contractDigest": c.contract.digest});
                    if let (Some(o), Value::Object(w)) =
                        (op.as_object_mut(), c.contract.worst_case_bound.to_json())
                    {
                        o.extend(w);
                    }
                    op
                })
                .collect();
            ops.sort_by(|a, b| a["operation"].as_str().cmp(&b["operation"].as_str()));
            ops
        })
        .unwrap_or_default();
    json!({
        "resource": adm.config.resource,
        "authorization_servers": adm.config.issuers,
        "bearer_methods_supported": ["header"],
        "authorization_details_types_supported": [palisade_rich::admission::grant::DETAILS_TYPE],
        "rich_binding": {
            "bindingId": bundle.map(|b| b.binding_id.clone()),
            "lockfileDigest": bundle.map(|b| b.digest.clone()),
            "operations": operations,
        },
    })
}

pub fn response(adm: &AdmissionState, bundle: Option<&Bundle>) -> Response<ProxyBody> {
    body::json_response(StatusCode::OK, &document(adm, bundle))
}
