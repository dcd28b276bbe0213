//! Lockfile authoring (issue 55: beside the CLI, not in the deciding crates): the tools that
//! write a bundle for an operator to review, never read on a request's path.
//!
//! - [`openapi`]: an OpenAPI 3.x document mapped to a lockfile and its contracts (pure);
//! - [`import_openapi`]: `palisade lock import-openapi`, which reads and writes the files;
//! - [`pin_mcp`]: `palisade lock pin-mcp`, which pins a running MCP server's tools;
//! - [`rehash`]: `palisade lock rehash`, the digests recomputed after a reviewed edit.

pub mod import_openapi;
pub mod openapi;
pub mod pin_mcp;
pub mod rehash;
