//! A webhook receiver for drift sinks.

use super::*;

// ---- a webhook receiver --------------------------------------------------------------------

/// A real HTTP server that takes POSTs and answers them from a script: the first
/// `failures` requests get `fail_status`, the rest 200. Keeps every body it accepted, and
/// counts every request.
pub struct Receiver {
    pub addr: SocketAddr,
    pub accepted: Arc<Mutex<Vec<Bytes>>>,
    /// The path each accepted body was posted to, in the same order.
    pub paths: Arc<Mutex<Vec<String>>>,
    pub attempts: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start(failures: usize, fail_status: StatusCode) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let attempts: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let paths: Arc<Mutex<Vec<String>>> = Arc::default();
        let (acc, att, pa) = (accepted.clone(), attempts.clone(), paths.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (acc, att, pa) = (acc.clone(), att.clone(), pa.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (acc, att, pa) = (acc.clone(), att.clone(), pa.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let n = att.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let mut resp = Response::new(full(""));
                            if n < failures {
                                *resp.status_mut() = fail_status;
                            } else {
                                // Both under `acc`'s lock: a body and its path stay paired.
                                let mut acc = acc.lock().unwrap();
                                acc.push(body);
                                pa.lock().unwrap().push(path);
                            }
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            accepted,
            paths,
            attempts,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/drift", self.addr)
    }

    /// Every event accepted so far, in the order received.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.accepted
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| serde_json::from_slice::<Vec<serde_json::Value>>(b).unwrap())
            .collect()
    }

    pub fn attempts(&self) -> usize {
        self.attempts.load(std::sync::atomic::Ordering::SeqCst)
    }
}
