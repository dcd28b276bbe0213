//! The wire: bodies, headers, TLS, the upstream client and what it sends.
//!
//! Nothing here decides whether a request may pass; it moves bytes and shapes messages for
//! the layers above (`pipeline`, `enforce`, `mcp`). It may use `config` and the policy crate,
//! never a module above it.
//! - [`body`]: the one body type, bounded collection, byte counting;
//! - [`headers`]: hop-by-hop stripping, forwarding headers, trace context, the PTCL names;
//! - [`conn`]: what a connection knows about the downstream peer;
//! - [`memo`]: a one-entry cache for what a connection derives from its requests' `Host`;
//! - [`tls`]: server and client TLS configuration, certificate reload;
//! - [`upstream`]: the pooled client to the protected application, its errors;
//! - [`bound`]: an upstream connection of a downstream connection's own (HTTP/2: one stream
//!   at a time);
//! - [`identity`]: the upstream's SPIFFE identity, checked at the TLS handshake;
//! - [`rewrite`]: a downstream request made into the upstream request;
//! - [`problem`] and [`jsonrpc`]: refusals as RFC 9457 problem+json and as JSON-RPC errors.

pub mod body;
pub mod bound;
pub mod client_addr;
pub mod conn;
pub mod db_tls;
pub mod headers;
pub mod identity;
pub mod jsonrpc;
pub mod memo;
pub mod problem;
pub mod rate;
pub mod rewrite;
pub mod tls;
pub mod upstream;
