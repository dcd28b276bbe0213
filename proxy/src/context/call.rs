//! One request as the stage that answers it holds it (pingora's `(session, ctx)`): the
//! server's state, the connection it came on, and the facts it is named by. Made once by the
//! pipeline after routing and lent to the stage, so a stage's helpers take one value instead
//! of the same four parameters each.

use std::sync::Arc;

use crate::context::{AppState, Enforcement, WriteContext};
use crate::net::conn::ConnInfo;

/// A request routed to one of the sidecar's surfaces.
pub struct Call<'a> {
    pub state: &'a Arc<AppState>,
    pub conn: &'a Arc<ConnInfo>,
    /// What receipts, events and answers name the request by.
    pub cx: WriteContext,
}

impl<'a> Call<'a> {
    pub fn new(state: &'a Arc<AppState>, conn: &'a Arc<ConnInfo>, cx: WriteContext) -> Self {
        Self { state, conn, cx }
    }

    /// Write enforcement's handles, when writes are enforced.
    pub fn enforcement(&self) -> Option<&'a Arc<Enforcement>> {
        self.state.enforcement.as_ref()
    }

    pub fn trace_id(&self) -> &str {
        &self.cx.trace_id
    }
}
