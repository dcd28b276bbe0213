//! `store.url` as libpq reads it (SPEC §10: "every libpq URL form"): a `postgres://` /
//! `postgresql://` URL or a `key=value` string, with libpq's TLS options (`sslmode` with
//! `verify-ca` and `verify-full`, `sslrootcert`, `sslcert`, `sslkey`), which tokio-postgres
//! does not read itself; the rest goes to tokio-postgres as written.
//!
//! Nothing here echoes the URL or a value from it: it may hold a password.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use deadpool_postgres::tokio_postgres::config::SslMode;
use deadpool_postgres::tokio_postgres::Config;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::clock::SharedClock;
use crate::{Retention, StoreError};

/// What the server's certificate is checked for (libpq's `sslmode`, SPEC §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing: the connection is encrypted, its peer unauthenticated.
    Nothing,
    /// A chain to the roots, any host name.
    Chain,
    /// A chain to the roots, for the host connected to.
    Full,
}

/// Where the roots come from: `sslrootcert` (a PEM file, or `system` for the system's).
pub enum Roots<'a> {
    File(&'a Path),
    System,
}

/// Makes the rustls client configuration for `sslmode`'s [`Verify`], the roots and an
/// optional client certificate (`sslcert`, `sslkey`). The sidecar passes the one its data
/// plane's TLS is built with (`net::db_tls::client_config`), so the store's TLS and the
/// proxy's share one provider, one root loading and one chain check.
pub type ClientTls =
    fn(Verify, Option<Roots<'_>>, Option<(&Path, &Path)>) -> Result<rustls::ClientConfig, String>;

/// How to reach the database.
pub struct Connect<'a> {
    /// A libpq connection URL (or key=value string); never logged: it may hold a password.
    pub url: &'a str,
    pub pool_size: usize,
    pub statement_timeout: std::time::Duration,
    pub retention: Retention,
    /// The store's time: expiries set and judged, sweeps.
    pub clock: SharedClock,
    /// How the TLS client configuration is made when the URL asks for TLS.
    pub tls: ClientTls,
}

/// The TLS options read here.
#[derive(Debug, Default, PartialEq)]
struct Tls {
    mode: Option<String>,
    root: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl Tls {
    /// Takes `key` if it is one of ours; `Err` for libpq TLS options not supported.
    fn take(&mut self, key: &str, value: String) -> Result<bool, StoreError> {
        let slot = match key {
            "sslmode" => &mut self.mode,
            "sslrootcert" => &mut self.root,
            "sslcert" => &mut self.cert,
            "sslkey" => &mut self.key,
            "sslcrl"
            | "sslcrldir"
            | "sslpassword"
            | "sslsni"
            | "sslcompression"
            | "ssl_min_protocol_version"
            | "ssl_max_protocol_version"
            | "sslcertmode" => return Err(bad(&format!("the option {key} is not supported"))),
            _ => return Ok(false),
        };
        *slot = Some(value);
        Ok(true)
    }
}

fn bad(why: &str) -> StoreError {
    StoreError::Unavailable(format!("store.url: {why}"))
}

/// The connection settings and TLS connector `url` describes.
pub(super) fn parse(url: &str, make: ClientTls) -> Result<(Config, MakeRustlsConnect), StoreError> {
    let mut tls = Tls::default();
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        strip_url(url, &mut tls)?
    } else {
        strip_key_values(url, &mut tls)?
    };
    let mut config = Config::from_str(&rest).map_err(|e| bad(&e.to_string()))?;
    let has_root = tls.root.is_some() || default_root().is_some();
    let (mode, verify) = match tls.mode.as_deref().unwrap_or("prefer") {
        "disable" => (SslMode::Disable, Verify::Nothing),
        // tokio-postgres has no `allow` (plain first): `prefer` is the safer neighbour.
        "allow" | "prefer" if has_root => (SslMode::Prefer, Verify::Chain),
        "allow" | "prefer" => (SslMode::Prefer, Verify::Nothing),
        "require" if has_root => (SslMode::Require, Verify::Chain),
        "require" => (SslMode::Require, Verify::Nothing),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::Full),
        _ => {
            return Err(bad(
                "sslmode is not one of disable, allow, prefer, require, verify-ca, verify-full",
            ))
        }
    };
    config.ssl_mode(mode);
    let root = tls.root.map(PathBuf::from).or_else(default_root);
    let roots = root.as_deref().map(|p| {
        if p == Path::new("system") {
            Roots::System
        } else {
            Roots::File(p)
        }
    });
    let client = match (&tls.cert, &tls.key) {
        (Some(c), Some(k)) => Some((Path::new(c.as_str()), Path::new(k.as_str()))),
        (None, None) => None,
        _ => return Err(bad("sslcert and sslkey go together")),
    };
    let rustls = make(verify, roots, client).map_err(|e| bad(&e))?;
    Ok((config, MakeRustlsConnect::new(rustls)))
}

/// libpq's default root file, when it exists.
fn default_root() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("HOME")?).join(".postgresql/root.crt");
    path.is_file().then_some(path)
}

/// The URL without our query parameters.
fn strip_url(url: &str, tls: &mut Tls) -> Result<String, StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(url.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| bad("a query parameter is not UTF-8"))
        };
        if !tls.take(&decode(k)?, decode(v)?)? {
            kept.push(pair);
        }
    }
    Ok(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

/// The `key=value` string without our keys. Values may be single-quoted, with `\'` and `\\`
/// escapes, as libpq writes them.
fn strip_key_values(s: &str, tls: &mut Tls) -> Result<String, StoreError> {
    let mut kept = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| bad("a key=value string has a key without a value"))?;
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(|c: char| c.is_whitespace() || c == '\'') {
            return Err(bad("a key=value string has a malformed key"));
        }
        let after = rest[eq + 1..].trim_start();
        let (value, len) = value_at(after)?;
        let raw = &after[..len];
        if !tls.take(key, value)? {
            kept.push(format!("{key}={raw}"));
        }
        rest = after[len..].trim_start();
    }
    Ok(kept.join(" "))
}

/// The value at the start of `s` and how many bytes it spans.
fn value_at(s: &str) -> Result<(String, usize), StoreError> {
    let mut value = String::new();
    if let Some(quoted) = s.strip_prefix('\'') {
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' => return Ok((value, i + 2)),
                '\\' => match chars.next() {
                    Some((_, e)) => value.push(e),
                    None => break,
                },
                c => value.push(c),
            }
        }
        return Err(bad("a quoted value is not closed"));
    }
    let len = s.find(char::is_whitespace).unwrap_or(s.len());
    value.push_str(&s[..len]);
    Ok((value, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_tls_parameters_are_taken_and_the_rest_kept() {
        let mut tls = Tls::default();
        let rest = strip_url(
            "postgresql://u:p%40ss@db.example:5433/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fca.pem",
            &mut tls,
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgresql://u:p%40ss@db.example:5433/app?application_name=x"
        );
        assert_eq!(tls.mode.as_deref(), Some("verify-full"));
        assert_eq!(tls.root.as_deref(), Some("/ca.pem"));
    }

    #[test]
    fn key_value_strings_keep_quoting() {
        let mut tls = Tls::default();
        let rest = strip_key_values(
            "host=/run/pg  password='it''s' sslmode = verify-ca dbname='a b' sslrootcert='/x y.pem'",
            &mut tls,
        );
        // libpq quoting escapes with a backslash, not by doubling: `'s'` is left without a
        // key, and the parse says so rather than guess.
        assert!(rest.is_err());
        let mut tls = Tls::default();
        let rest = strip_key_values(
            r"host=/run/pg password='it\'s' sslmode = verify-ca dbname='a b' sslrootcert='/x y.pem'",
            &mut tls,
        )
        .unwrap();
        assert_eq!(rest, r"host=/run/pg password='it\'s' dbname='a b'");
        assert_eq!(tls.mode.as_deref(), Some("verify-ca"));
        assert_eq!(tls.root.as_deref(), Some("/x y.pem"));
    }

    #[test]
    fn refusals_name_the_option_not_the_url() {
        for url in [
            "postgresql://u:secretpw@h/db?sslmode=bogus",
            "postgresql://u:secretpw@h/db?sslcrl=/x",
            "host=h password=secretpw sslcert=/c.pem",
            "host=h password='secretpw",
            "postgresql://u:secretpw@h:notaport/db",
        ] {
            let no_tls: ClientTls = |_, _, _| Err("no TLS in this test".into());
            let e = parse(url, no_tls).err().expect(url).to_string();
            assert!(!e.contains("secretpw"), "{e}");
            assert!(e.starts_with("state store unavailable: store.url: "), "{e}");
        }
    }
}
