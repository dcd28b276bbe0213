//! An upstream connection bound to one downstream connection (issue 19).
//!
//! The pooled client pays, per request, a pool checkout and return under a lock and, when the
//! answer has a body, a spawned task that puts the connection back once the body is done.
//! A sidecar in front of one application does not need a pool for the common case: a
//! downstream HTTP/1 connection sends one request at a time, so it can keep one upstream
//! connection of its own, handshaken on its first request and closed when it closes, as
//! pingora and Envoy's per-connection pools do.
//!
//! Used only for plain-HTTP upstreams; HTTPS and pinned identities keep the pool. An HTTP/2
//! downstream connection's streams run concurrently: one at a time uses the slot, the others
//! the pool. The rules of the pool stay: a request is sent again only when hyper hands it back
//! unsent from a *reused* connection (the upstream closed it while idle), never once it
//! may have been written.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery};
use http::{header, HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::net::body::ProxyBody;
use crate::net::upstream::{error_chain, Upstream, UpstreamError};

/// How long a request waits for its connection's previous exchange to finish before it
/// opens another connection. On HTTP/1 the previous answer has been sent downstream before
/// the next request arrives, so this is a guard, not a wait one expects to see.
const READY_WAIT: Duration = Duration::from_secs(1);

type Sender = http1::SendRequest<ProxyBody>;

/// The upstream-connection slot of one downstream connection (empty until its first
/// request, or after its upstream connection closed). Clones share the slot. Requests with
/// no downstream connection (released escrows, compensations) have no `Bound` at all
/// (`ConnInfo::upstream` is `None`) and use the pool.
#[derive(Clone, Default)]
pub struct Bound(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    sender: Option<Sender>,
    /// An HTTP/2 stream is using the slot; the connection's other streams take the pool.
    claimed: bool,
    /// The connection's coarse deadline for `upstream.timeout` (see [`Bound::arm`]).
    deadline: Option<Pin<Box<Sleep>>>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bound")
    }
}

/// How a request may use its downstream connection's [`Bound`] slot: an HTTP/1 connection
/// sends one request at a time and owns it; an HTTP/2 connection's streams run concurrently,
/// so one stream at a time uses it and the others go through the pool.
#[derive(Debug, Clone, Copy)]
pub struct BoundUse<'a> {
    pub bound: &'a Bound,
    pub shared: bool,
}

/// The slot held by one HTTP/2 stream; released when the exchange's head is back (or the
/// request is dropped).
struct Claim<'a>(&'a Bound);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.lock().claimed = false;
    }
}

impl Bound {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn claim(&self) -> Option<Claim<'_>> {
        let mut s = self.lock();
        if s.claimed {
            return None;
        }
        s.claimed = true;
        Some(Claim(self))
    }

    /// Whether the slot's connection can take a request now (or there is none yet, or it
    /// closed, and the next request opens one).
    fn free(&self) -> bool {
        self.lock()
            .sender
            .as_ref()
            .is_none_or(|s| s.is_ready() || s.is_closed())
    }

    /// Makes the connection's deadline fire between `due` and `due + grain(limit)`: one timer
    /// per connection, moved only when it would fire too early or too late, instead of a
    /// timer registered and removed for every request (issue 19: ≈ 600 instructions a
    /// request). Back-to-back requests move it once per grain, not once each.
    fn arm(&self, due: Instant, limit: Duration) {
        let latest = due + grain(limit);
        let mut s = self.lock();
        match &mut s.deadline {
            Some(d) if d.deadline() >= due && d.deadline() <= latest => {}
            Some(d) => d.as_mut().reset(latest),
            None => s.deadline = Some(Box::pin(tokio::time::sleep_until(latest))),
        }
    }

    /// Ready once the deadline [`Bound::arm`] set for the request polling it has passed.
    fn poll_deadline(&self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.lock().deadline {
            Some(d) => d.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    fn take(&self) -> Option<Sender> {
        self.lock().sender.take()
    }

    fn put(&self, sender: Sender) {
        let mut s = self.lock();
        if s.sender.is_none() {
            s.sender = Some(sender);
        }
    }

    /// Sends `req` (absolute URI to a plain-HTTP upstream) on this connection's upstream
    /// connection, opening one when it has none or its last one closed.
    pub(crate) async fn send(
        &self,
        mut req: Request<ProxyBody>,
        connect_timeout: Duration,
    ) -> Result<Response<Incoming>, UpstreamError> {
        if !req.headers().contains_key(header::HOST) {
            if let Some(h) = req
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            {
                req.headers_mut().insert(header::HOST, h);
            }
        }
        let authority = req
            .uri()
            .authority()
            .cloned()
            .ok_or_else(|| UpstreamError::Connect("upstream URI has no authority".into()))?;
        // HTTP/1 to an origin server: origin-form (the pool does the same). The path-and-query
        // is shared, not parsed again.
        let mut origin = http::uri::Parts::default();
        origin.path_and_query = Some(
            req.uri()
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
        *req.uri_mut() =
            Uri::from_parts(origin).map_err(|e| UpstreamError::Failed(e.to_string()))?;

        let reused = match self.take() {
            // Idle since its last answer: ready without waiting, and no timer armed for it.
            Some(s) if s.is_ready() => Some(s),
            Some(mut s) if !s.is_closed() => {
                match Box::pin(tokio::time::timeout(READY_WAIT, s.ready())).await {
                    Ok(Ok(())) => Some(s),
                    _ => None,
                }
            }
            _ => None,
        };
        let (mut sender, was_reused) = match reused {
            Some(s) => (s, true),
            // Boxed, as the wait above: rare, and their state would otherwise make every
            // request's future (which hyper keeps per connection) larger.
            None => (Box::pin(connect(&authority, connect_timeout)).await?, false),
        };
        let req = match sender.try_send_request(req).await {
            Ok(resp) => {
                self.put(sender);
                return Ok(resp);
            }
            Err(mut e) => match e.take_message() {
                // Handed back unsent from a connection the upstream closed while it sat idle:
                // the one case the pool retries too.
                Some(req) if was_reused => req,
                _ => return Err(UpstreamError::Failed(error_chain(e.error()))),
            },
        };
        let mut sender = Box::pin(connect(&authority, connect_timeout)).await?;
        match sender.try_send_request(req).await {
            Ok(resp) => {
                self.put(sender);
                Ok(resp)
            }
            Err(e) => Err(UpstreamError::Failed(error_chain(e.error()))),
        }
    }
}

/// [`Upstream::send_as`] on the downstream connection's own upstream connection when it has
/// one and the upstream is plain HTTP (docs/decisions.md, "An upstream connection per
/// downstream connection"); else through the pool. Of an HTTP/2 connection's concurrent
/// streams, one at a time uses it, the others the pool.
pub(crate) async fn send_on(
    upstream: &Upstream,
    req: Request<ProxyBody>,
    identity: Option<&str>,
    bound: Option<BoundUse<'_>>,
) -> Result<Response<Incoming>, UpstreamError> {
    match bound {
        Some(BoundUse { bound: b, shared }) if !upstream.is_https() => {
            // A stream takes the slot only when no other stream holds it and its connection
            // is not still carrying an earlier stream's body: a stream never waits on another.
            let claim = if shared {
                match b.claim() {
                    Some(claim) if b.free() => Some(claim),
                    _ => return upstream.send_as(req, identity).await,
                }
            } else {
                None
            };
            let limit = upstream.timeout();
            b.arm(Instant::now() + limit, limit);
            let mut send = std::pin::pin!(b.send(req, upstream.connect_timeout()));
            let sent = std::future::poll_fn(|cx| match send.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(r),
                Poll::Pending => b
                    .poll_deadline(cx)
                    .map(|()| Err(UpstreamError::Timeout(limit))),
            })
            .await;
            drop(claim);
            sent
        }
        _ => upstream.send_as(req, identity).await,
    }
}

/// How late past `upstream.timeout` a bound connection's request may be cut off: an eighth of
/// the limit, at most 250 ms (30 s → 250 ms; 1 s → 125 ms).
fn grain(limit: Duration) -> Duration {
    (limit / 8).min(Duration::from_millis(250))
}

/// A new HTTP/1 connection to `authority`, its connection task spawned; the task ends when
/// the sender is dropped and the last exchange is done.
async fn connect(
    authority: &Authority,
    connect_timeout: Duration,
) -> Result<Sender, UpstreamError> {
    // `[::1]` is the URI's spelling of an address, not a name to resolve.
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let connecting = TcpStream::connect((host, port));
    let stream = match tokio::time::timeout(connect_timeout, connecting).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(UpstreamError::Connect(format!("{host}:{port}: {e}"))),
        Err(_) => {
            return Err(UpstreamError::Connect(format!(
                "{host}:{port}: connect timed out after {connect_timeout:?}"
            )))
        }
    };
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}
