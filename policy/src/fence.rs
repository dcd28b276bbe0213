//! Fence and pre-image decisions (SPEC §5.2 checks 11–12, §5.3).
//!
//! The proxy reads the resource's current epoch from the store and fetches the upstream's
//! current representation; these functions decide on what it gathered. The store's own
//! compare-and-advance repeats check 11 atomically, so a race between two replicas is decided
//! there; this check refuses early and without a store write.

use crate::codes::{ErrorCode, Refusal};
use crate::digest::Sha256Digest;

/// Check 11: the lease's epoch must be newer than the resource's.
pub fn check_epoch(current: u64, lease_epoch: u64) -> Result<(), Refusal> {
    if current < lease_epoch {
        Ok(())
    } else {
        Err(Refusal::new(
            ErrorCode::StaleFenceEpoch,
            "cas_fence_epoch is not newer than the resource's current epoch",
        ))
    }
}

/// What the pre-image GET answered, reduced to what the digest depends on.
#[derive(Debug, Clone, Copy)]
pub struct Fetched<'a> {
    pub status: u16,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

/// Whether a media type is JSON (`application/json` or any `+json` suffix, RFC 6839).
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The state digest of a fetched representation (check 12):
/// - 404 or 410: the absent state, SHA-256 of zero bytes;
/// - 2xx JSON that is I-JSON: SHA-256 of its JCS form (so formatting never matters);
/// - any other 2xx body (including JSON that is not I-JSON): SHA-256 of the raw bytes;
/// - anything else: `Err`, the pre-image is unavailable (503).
pub fn pre_image_digest(fetched: &Fetched<'_>, max_depth: usize) -> Result<Sha256Digest, Refusal> {
    match fetched.status {
        404 | 410 => Ok(Sha256Digest::empty()),
        200..=299 => {
            if fetched.content_type.is_some_and(is_json_media_type) {
                if let Ok(canonical) = crate::canon::canonicalize(fetched.body, max_depth) {
                    return Ok(Sha256Digest::of(&canonical));
                }
            }
            Ok(Sha256Digest::of(fetched.body))
        }
        _ => Err(Refusal::new(
            ErrorCode::PreimageUnavailable,
            "the upstream did not return the resource's current representation",
        )),
    }
}

/// Check 12: the resource still has the state the agent saw.
pub fn check_pre_image(expected: &Sha256Digest, actual: &Sha256Digest) -> Result<(), Refusal> {
    if expected == actual {
        Ok(())
    } else {
        Err(Refusal::new(
            ErrorCode::StaleFenceEpoch,
            "the resource's current state does not match pre_image_state_hash",
        )
        .with_reason("pre-image-mismatch"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_newer_epoch_passes() {
        assert!(check_epoch(0, 1).is_ok());
        assert!(check_epoch(41, 42).is_ok());
        for (current, lease) in [(1, 1), (5, 4), (u64::MAX, 1)] {
            let r = check_epoch(current, lease).unwrap_err();
            assert_eq!(r.code, ErrorCode::StaleFenceEpoch, "{current} vs {lease}");
            assert_eq!(r.reason, None);
        }
    }

    #[test]
    fn pre_image_digests_follow_the_spec() {
        let json_doc = br#"{ "qty": 5, "id": "1" }"#;
        let canonical = Sha256Digest::of(br#"{"id":"1","qty":5}"#);
        let rows: Vec<(&str, Fetched<'_>, Result<Sha256Digest, ErrorCode>)> = vec![
            (
                "absent 404",
                Fetched {
                    status: 404,
                    content_type: None,
                    body: b"gone",
                },
                Ok(Sha256Digest::empty()),
            ),
            (
                "absent 410",
                Fetched {
                    status: 410,
                    content_type: Some("application/json"),
                    body: b"{}",
                },
                Ok(Sha256Digest::empty()),
            ),
            (
                "json is canonicalised",
                Fetched {
                    status: 200,
                    content_type: Some("application/json; charset=utf-8"),
                    body: json_doc,
                },
                Ok(canonical),
            ),
            (
                "+json too",
                Fetched {
                    status: 200,
                    content_type: Some("application/vnd.erp+json"),
                    body: json_doc,
                },
                Ok(canonical),
            ),
            (
                "text is raw bytes",
                Fetched {
                    status: 200,
                    content_type: Some("text/plain"),
                    body: b"hello",
                },
                Ok(Sha256Digest::of(b"hello")),
            ),
            (
                "no type is raw bytes",
                Fetched {
                    status: 200,
                    content_type: None,
                    body: json_doc,
                },
                Ok(Sha256Digest::of(json_doc)),
            ),
            (
                "broken json is raw bytes",
                Fetched {
                    status: 200,
                    content_type: Some("application/json"),
                    body: b"{\"a\":1,\"a\":2}",
                },
                Ok(Sha256Digest::of(b"{\"a\":1,\"a\":2}")),
            ),
            (
                "server error",
                Fetched {
                    status: 500,
                    content_type: None,
                    body: b"",
                },
                Err(ErrorCode::PreimageUnavailable),
            ),
            (
                "forbidden",
                Fetched {
                    status: 403,
                    content_type: None,
                    body: b"",
                },
                Err(ErrorCode::PreimageUnavailable),
            ),
            (
                "redirect",
                Fetched {
                    status: 302,
                    content_type: None,
                    body: b"",
                },
                Err(ErrorCode::PreimageUnavailable),
            ),
        ];
        for (name, fetched, want) in rows {
            let got = pre_image_digest(&fetched, 64).map_err(|r| r.code);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_changed_state_is_a_stale_fence_with_its_reason() {
        let a = Sha256Digest::of(b"a");
        assert!(check_pre_image(&a, &a).is_ok());
        let r = check_pre_image(&a, &Sha256Digest::empty()).unwrap_err();
        assert_eq!(r.code, ErrorCode::StaleFenceEpoch);
        assert_eq!(r.reason, Some("pre-image-mismatch"));
        assert_eq!(r.status(), 409);
    }
}
