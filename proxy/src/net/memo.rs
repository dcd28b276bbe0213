//! A one-entry cache for what a connection derives from a value its requests repeat.

use std::sync::Mutex;

/// The value made from the last key a connection's requests named, kept while the next one
/// names the same: a client seldom changes `Host` on a connection, so the normalised origin
/// and the `Forwarded` value are made once per connection, not once per request (issue 19).
/// A different key replaces the entry.
#[derive(Debug)]
pub struct LastKey<V>(Mutex<Option<(String, V)>>);

impl<V> Default for LastKey<V> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

/// A clone starts empty: what is kept is a cache, remade on the clone's first use.
impl<V> Clone for LastKey<V> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<V: Clone> LastKey<V> {
    /// The value for `key`: the kept one when `key` is the last key, else `make()`'s, kept in
    /// its place (`None` is not kept).
    pub fn get_or(&self, key: &str, make: impl FnOnce() -> Option<V>) -> Option<V> {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((k, v)) = last.as_ref() {
            if k == key {
                return Some(v.clone());
            }
        }
        let v = make()?;
        *last = Some((key.to_owned(), v.clone()));
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_per_run_of_the_same_key() {
        let memo = LastKey::default();
        let mut made = 0;
        let mut get = |key: &str| {
            memo.get_or(key, || {
                made += 1;
                (!key.is_empty()).then_some(key.len())
            })
        };
        assert_eq!(get("a.example"), Some(9));
        assert_eq!(get("a.example"), Some(9));
        assert_eq!(get("bb"), Some(2));
        assert_eq!(get(""), None, "nothing made");
        assert_eq!(get("bb"), Some(2), "a failed make leaves the entry");
        assert_eq!(get("a.example"), Some(9));
        assert_eq!(made, 4);
    }
}
