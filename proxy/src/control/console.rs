//! The operators' console (SPEC §9, issue 39): `GET /ui/` on the admin listener.
//!
//! Three static files built into the binary (`proxy/assets/console/`): no CDN, no external
//! font, nothing to build on the user's side. The page holds no data of its own: everything
//! it shows or does is one documented admin API call made from the browser with the
//! operator's own credential (a bearer token kept in the tab's session storage, or the
//! browser's client certificate under admin mTLS). So the assets are served without a
//! credential, as `/healthz` is, and carry nothing secret.
//!
//! Safety, by construction rather than by care:
//! - a strict Content-Security-Policy: scripts and styles only from these files, no inline
//!   script or style, no eval, connections only to this origin, no framing, no form posts;
//! - the script builds the page with `textContent` and DOM nodes only, never `innerHTML`, so a
//!   request body holding markup is shown as text and never runs;
//! - no cookie is ever set, so there is no ambient authority for a cross-site request to ride.

use http::{header, HeaderValue, Response, StatusCode};

use crate::net::body::{self, ProxyBody};

const INDEX: &str = include_str!("../../assets/console/index.html");
const SCRIPT: &str = include_str!("../../assets/console/console.js");
const STYLE: &str = include_str!("../../assets/console/console.css");

/// The policy every console answer carries.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; \
    base-uri 'none'";

/// `GET /ui…`: `rest` is the path after `/ui`.
pub fn asset(rest: &str) -> Response<ProxyBody> {
    let (status, body, content_type) = match rest {
        // Relative asset URLs resolve under /ui/ only with the slash.
        "" => return redirect(),
        "/" | "/index.html" => (StatusCode::OK, INDEX, "text/html; charset=utf-8"),
        "/console.js" => (StatusCode::OK, SCRIPT, "text/javascript; charset=utf-8"),
        "/console.css" => (StatusCode::OK, STYLE, "text/css; charset=utf-8"),
        _ => (
            StatusCode::NOT_FOUND,
            "not found\n",
            "text/plain; charset=utf-8",
        ),
    };
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure(h);
    r
}

fn redirect() -> Response<ProxyBody> {
    let mut r = Response::new(body::empty());
    *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/ui/"));
    secure(r.headers_mut());
    r
}

fn secure(h: &mut http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    // Small files, served from memory: always the binary's own version.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        // No inline script or style, nothing from elsewhere: the CSP would refuse them.
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
        assert!(!INDEX.contains("http://") && !INDEX.contains("https://"));
        // Nothing in the script parses a value as markup or code.
        for sink in [
            ".innerHTML",
            ".outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "Function(",
        ] {
            assert!(!SCRIPT.contains(sink), "{sink}");
        }
        for path in ["/", "/console.js", "/console.css"] {
            let r = asset(path);
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            assert_eq!(r.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        }
        assert_eq!(asset("/x.js").status(), StatusCode::NOT_FOUND);
        assert_eq!(asset("").headers()[header::LOCATION], "/ui/");
    }
}
