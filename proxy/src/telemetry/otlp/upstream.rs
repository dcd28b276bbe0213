//! The upstream call as a client span of the request's (HTTP semantic conventions): the
//! upstream's `traceparent` names it as the parent of the upstream's own work.

use std::future::Future;

use http::{Request, Response};
use hyper::body::Incoming;

use super::span::{Child, Kind, Value};
use crate::net::body::ProxyBody;
use crate::net::upstream::UpstreamError;

/// `send(req)`, as a child span when the request is traced; as it is otherwise.
pub async fn call<Fut>(
    mut req: Request<ProxyBody>,
    send: impl FnOnce(Request<ProxyBody>) -> Fut,
) -> Result<Response<Incoming>, UpstreamError>
where
    Fut: Future<Output = Result<Response<Incoming>, UpstreamError>>,
{
    let attributes = || {
        let uri = req.uri();
        // Room for the answer's status too: one allocation.
        let mut a = Vec::with_capacity(4);
        a.push((
            "http.request.method",
            Value::Str(super::span::method_name(req.method())),
        ));
        // The upstream's address is the operator's configuration, not the client's.
        if let Some(host) = uri.host() {
            a.push(("server.address", Value::Shared(shared_host(host))));
        }
        if let Some(port) = uri.port_u16() {
            a.push(("server.port", Value::Int(i64::from(port))));
        }
        a
    };
    let name = super::span::method_name(req.method());
    let Some(mut child) = Child::start(name, Kind::Client, attributes) else {
        return send(req).await;
    };
    child.propagate(req.headers_mut());
    // Not run under the child: nothing below the upstream call makes a span, and a scope
    // would swap the task-local on every poll of the call.
    let answered = send(req).await;
    match &answered {
        Ok(resp) => {
            let status = resp.status().as_u16();
            child.set("http.response.status_code", Value::Int(i64::from(status)));
            if status >= 400 {
                child.failed(status_class(status));
            }
        }
        Err(e) => child.failed(match e {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Failed(_) => "failed",
            UpstreamError::Identity(_) => "identity",
        }),
    }
    answered
}

thread_local! {
    /// The upstream host last seen on this thread, shared: the sidecar's upstream is one
    /// configured host, so a span takes a reference to it, not a copy.
    static HOST: std::cell::RefCell<Option<std::sync::Arc<str>>> = const { std::cell::RefCell::new(None) };
}

fn shared_host(host: &str) -> std::sync::Arc<str> {
    HOST.with(|h| {
        let mut h = h.borrow_mut();
        match h.as_ref() {
            Some(shared) if &**shared == host => shared.clone(),
            _ => {
                let shared: std::sync::Arc<str> = host.into();
                *h = Some(shared.clone());
                shared
            }
        }
    })
}

fn status_class(status: u16) -> &'static str {
    if status >= 500 {
        "5xx"
    } else {
        "4xx"
    }
}
