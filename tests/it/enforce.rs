//! Write enforcement through the real binary against a real upstream (SPEC §5.2, §5.3, §5.5):
//! each refusal's status, code, signed rejection receipt and drift event, and that no write
//! reached the upstream; the fence invariant under concurrency; epochs across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use palisade_policy::lease;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

mod authority;
mod epochs;
mod recovery;
mod refusals;
