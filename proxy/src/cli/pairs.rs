//! `NAME=VALUE` flags (`--side-effect TOOL=EFFECT`, `--reversibility OPERATION=VALUE`): one
//! parser, so every such flag refuses the same mistakes the same way.

use std::collections::BTreeMap;

/// Splits each pair at its last `=` (names such as `POST /a?b=c` may hold one; values do
/// not). Refuses a pair without `=` and a name given twice: a later value silently winning
/// would hide a typo.
pub(super) fn name_values(
    flag: &str,
    shape: &str,
    pairs: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in pairs {
        let (name, value) = pair
            .rsplit_once('=')
            .ok_or_else(|| format!("{flag} {pair:?}: expected {shape}"))?;
        if out.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err(format!("{flag}: {name:?} is named twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pairs_split_at_the_last_equals_and_names_are_unique() {
        let m = name_values("--x", "A=B", &["a=1".into(), "GET /q?k=v=2".into()]).unwrap();
        assert_eq!(m["a"], "1");
        assert_eq!(m["GET /q?k=v"], "2");
        assert!(name_values("--x", "A=B", &["a".into()])
            .unwrap_err()
            .contains("expected A=B"));
        let e = name_values("--x", "A=B", &["a=1".into(), "a=2".into()]).unwrap_err();
        assert!(e.contains("named twice"), "{e}");
    }
}
