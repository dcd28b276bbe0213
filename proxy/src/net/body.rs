//! Body types shared by the data plane.
//!
//! Everything the proxy sends is a [`ProxyBody`]: a boxed body so that streamed upstream
//! bodies, buffered bodies and problem documents share one type. Streaming stays streaming:
//! boxing adds no buffering, and hyper applies backpressure through `poll_frame`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A plain-text response (`text/plain; charset=utf-8`): the admin API's short answers.
pub fn text_response(status: http::StatusCode, text: String) -> http::Response<ProxyBody> {
    let mut r = http::Response::new(full(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A JSON document response (`application/json`, not cached): the sidecar's own answers.
pub fn json_response(
    status: http::StatusCode,
    doc: &serde_json::Value,
) -> http::Response<ProxyBody> {
    json_text_response(status, serde_json::to_vec(doc).unwrap_or_default())
}

/// [`json_response`] for a document already encoded.
pub fn json_text_response(
    status: http::StatusCode,
    text: impl Into<Bytes>,
) -> http::Response<ProxyBody> {
    let mut r = http::Response::new(full(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    r
}

/// A body from a stream of chunks (each one a data frame).
pub fn from_stream<S>(stream: S) -> ProxyBody
where
    S: futures_util::Stream<Item = Result<Bytes, BoxError>> + Send + 'static,
{
    use futures_util::StreamExt as _;
    http_body_util::StreamBody::new(stream.map(|r| r.map(hyper::body::Frame::data))).boxed_unsync()
}

pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// What a [`Counted`] body does once with its byte count (the exchange's access line).
pub trait OnEnd {
    fn on_end(self, bytes: u64);
}

pin_project_lite::pin_project! {
    /// Counts the bytes a body yields and calls `on_end` once with the total, when the body
    /// ends or is dropped (a client that hangs up mid-stream still gets its access-log line).
    pub struct Counted<B, F: OnEnd> {
        #[pin]
        inner: B,
        bytes: u64,
        on_end: Option<F>,
    }

    impl<B, F: OnEnd> PinnedDrop for Counted<B, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(f) = this.on_end.take() {
                f.on_end(*this.bytes);
            }
        }
    }
}

impl<B, F: OnEnd> Counted<B, F> {
    pub fn new(inner: B, on_end: F) -> Self {
        Self {
            inner,
            bytes: 0,
            on_end: Some(on_end),
        }
    }
}

impl<B: Body<Data = Bytes>, F: OnEnd> Body for Counted<B, F> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => {
                if let Some(f) = this.on_end.take() {
                    f.on_end(*this.bytes);
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a body could not be buffered.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("body exceeds the limit of {0} bytes")]
    TooLarge(u64),
    #[error("body could not be read: {0}")]
    Read(BoxError),
}

/// Reads a whole body, refusing it as soon as it passes `limit` bytes (before reading the rest,
/// SPEC §3), and at once when `Content-Length` already says so.
pub async fn collect_limited<B>(body: B, limit: u64) -> Result<Bytes, CollectError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > limit {
        return Err(CollectError::TooLarge(limit));
    }
    let limited = http_body_util::Limited::new(body, limit as usize);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(CollectError::TooLarge(limit)),
        Err(e) => Err(CollectError::Read(e)),
    }
}

/// [`collect_limited`] for a [`ProxyBody`]. Not generic on purpose: a generic `Into` bound
/// inside a spawned future trips rustc's higher-ranked `Send` check.
pub async fn collect_proxy(body: ProxyBody, limit: u64) -> Result<Bytes, CollectError> {
    match collect_proxy_partial(body, limit).await {
        (bytes, None) => Ok(bytes),
        (_, Some(e)) => Err(e),
    }
}

/// What arrived of a [`ProxyBody`], up to `limit` bytes, and why it ended early if it did. A
/// stream that breaks after the message a reader needs (an SSE answer, then a reset) still
/// gives that message; the reader judges whether what arrived is whole.
pub async fn collect_proxy_partial(
    mut body: ProxyBody,
    limit: u64,
) -> (Bytes, Option<CollectError>) {
    if body.size_hint().lower() > limit {
        return (Bytes::new(), Some(CollectError::TooLarge(limit)));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => return (buf.freeze(), Some(CollectError::Read(e))),
        };
        if let Some(data) = frame.data_ref() {
            if buf.len() as u64 + data.len() as u64 > limit {
                return (buf.freeze(), Some(CollectError::TooLarge(limit)));
            }
            buf.extend_from_slice(data);
        }
    }
    (buf.freeze(), None)
}

/// How much of an over-limit request body is read and discarded after the 413 is sent.
pub const LINGER_BYTES: u64 = 16 << 20;
/// How long an over-limit request body is read and discarded after the 413 is sent.
pub const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads a downstream request body, refusing it as soon as it passes `limit` bytes (at once
/// when `Content-Length` says so). On refusal the rest of the body is read and discarded in
/// the background, up to [`LINGER_BYTES`] or [`LINGER_TIME`] ("lingering close", as nginx
/// does): a client that is still sending then reads the 413 instead of a connection reset.
pub async fn read_request_body(
    mut body: hyper::body::Incoming,
    limit: u64,
) -> Result<Bytes, CollectError> {
    if body.size_hint().lower() > limit {
        linger(body);
        return Err(CollectError::TooLarge(limit));
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| CollectError::Read(e.into()))?;
        if let Some(data) = frame.data_ref() {
            if buf.len() as u64 + data.len() as u64 > limit {
                linger(body);
                return Err(CollectError::TooLarge(limit));
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(buf.freeze())
}

fn linger(mut body: hyper::body::Incoming) {
    tokio::spawn(async move {
        let drain = async {
            let mut seen = 0u64;
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(d) = frame.data_ref() {
                    seen += d.len() as u64;
                    if seen > LINGER_BYTES {
                        break;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that breaks after its first chunk keeps that chunk for a partial reader, and is
    /// an error to a whole one.
    #[tokio::test]
    async fn a_body_that_breaks_keeps_what_arrived_before() {
        let chunks = || {
            futures_util::stream::iter(vec![
                Ok(Bytes::from_static(b"event: message\ndata: {}\n\n")),
                Err(BoxError::from("connection reset")),
            ])
        };
        let (got, broken) = collect_proxy_partial(from_stream(chunks()), 1 << 20).await;
        assert_eq!(&got[..], b"event: message\ndata: {}\n\n");
        assert!(matches!(broken, Some(CollectError::Read(_))), "{broken:?}");
        assert!(collect_proxy(from_stream(chunks()), 1 << 20).await.is_err());
        let (got, broken) = collect_proxy_partial(from_stream(chunks()), 4).await;
        assert!(got.is_empty() && matches!(broken, Some(CollectError::TooLarge(4))));
        let whole = collect_proxy(full("abc"), 3)
            .await
            .expect("within the limit");
        assert_eq!(&whole[..], b"abc");
    }
}
