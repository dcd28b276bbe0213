//! The floor hyper sets for the data plane (issue 19): a reverse proxy made of hyper's HTTP/1
//! server and client and nothing else, shaped like palisade's pass-through (a current-thread
//! runtime on one CPU, an upstream connection of its own per downstream connection, made on
//! the first request), but with none of its work: no header is added, removed or checked, no
//! timeout, log, metric or trace. What palisade spends above this is ours; what this spends
//! above nginx is hyper's and tokio's. `benches/compare` and `benches/instructions` run it as
//! the `hyper` target.
//!
//!     cargo run --release --example bare_hyper -- 127.0.0.1:18090 127.0.0.1:18081

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

type Body = BoxBody<Bytes, hyper::Error>;
type Sender = client::SendRequest<Incoming>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: bare_hyper <listen addr> <upstream addr>".into());
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(listen, upstream))
}

async fn serve(listen: String, upstream: String) -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(&listen).await?;
    let upstream: Arc<str> = upstream.into();
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let slot: Arc<Mutex<Option<Sender>>> = Arc::default();
            let svc = service_fn(move |req| forward(req, upstream.clone(), slot.clone()));
            let _ = server::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn forward(
    req: Request<Incoming>,
    upstream: Arc<str>,
    slot: Arc<Mutex<Option<Sender>>>,
) -> Result<Response<Body>, Infallible> {
    let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut sender = match taken {
        Some(s) if s.is_ready() => s,
        _ => match connect(&upstream).await {
            Ok(s) => s,
            Err(_) => return Ok(bad_gateway()),
        },
    };
    match sender.send_request(req).await {
        Ok(resp) => {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
            Ok(resp.map(|b| b.boxed()))
        }
        Err(_) => Ok(bad_gateway()),
    }
}

async fn connect(upstream: &str) -> Result<Sender, Box<dyn std::error::Error>> {
    let stream = TcpStream::connect(upstream).await?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = client::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

fn bad_gateway() -> Response<Body> {
    let mut resp = Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp
}
