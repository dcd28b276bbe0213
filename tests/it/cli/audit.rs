//! `audit verify` offline, naming what was changed.

use super::*;

/// Rewrites one row of the embedded store's `table` (a stopped sidecar's file, changed offline).
fn tamper(store: &Path, table: &str, key: u64, change: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
    use redb::ReadableTable as _;
    let db = redb::Database::open(store).unwrap();
    let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(table);
    let wtx = db.begin_write().unwrap();
    let before = {
        let mut t = wtx.open_table(def).unwrap();
        let before = t.get(key).unwrap().unwrap().value().to_vec();
        t.insert(key, change(before.clone()).as_slice()).unwrap();
        before
    };
    wtx.commit().unwrap();
    before
}

#[tokio::test]
async fn audit_verify_checks_the_log_and_names_what_was_changed_offline() {
    use palisade::store::embedded::EmbeddedStore;
    use palisade_policy::keys::KeyPair;
    use palisade_policy::log::Signer;
    use palisade_policy::receipt::{ReceiptBody, ReceiptKind};

    let dir = tempfile::tempdir().unwrap();
    let key_a = dir.path().join("a.pem");
    let key_b = dir.path().join("b.pem");
    palisade(&["keygen", "--out", key_a.to_str().unwrap()], b"");
    palisade(&["keygen", "--out", key_b.to_str().unwrap()], b"");
    let store_path = dir.path().join("state.redb");
    {
        let key = KeyPair::from_pkcs8_pem(&std::fs::read_to_string(&key_a).unwrap()).unwrap();
        // No public base in the configuration below: the log's origin is `palisade`.
        let signer = Signer::new("palisade", std::sync::Arc::new(key)).unwrap();
        let store = EmbeddedStore::open(&store_path, std::sync::Arc::new(signer)).unwrap();
        for i in 0..5 {
            let body = ReceiptBody::new(
                format!("urn:uuid:r{i}"),
                ReceiptKind::Rejection,
                "2026-12-02T12:00:00.000Z".into(),
            );
            store.append_receipt(body).await.unwrap();
        }
    }
    let config = |key: &Path| {
        let p = dir.path().join(format!(
            "{}.toml",
            key.file_stem().unwrap().to_str().unwrap()
        ));
        std::fs::write(
            &p,
            format!(
                "[upstream]\nurl = \"http://127.0.0.1:9\"\n[signing]\nkey = \"{}\"\n[store]\npath = \"{}\"\n",
                key.display(),
                store_path.display()
            ),
        )
        .unwrap();
        p
    };
    let verify = |key: &Path, json: bool| {
        let c = config(key);
        let mut args = vec!["audit", "verify", "--config", c.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        palisade(&args, b"")
    };
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("receipt log of 5 entries"),
        "{}",
        stdout(&o)
    );
    let o = verify(&key_a, true);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            doc["ok"].as_bool(),
            doc["size"].as_u64(),
            doc["retained"].as_u64()
        ),
        (Some(true), Some(5), Some(5)),
        "{doc}"
    );

    // Another key: the newest checkpoint is not the log's.
    let o = verify(&key_b, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the newest checkpoint"),
        "{}",
        stderr(&o)
    );

    // An entry changed offline is named by its index.
    let before = tamper(&store_path, "log_entries", 2, |e| {
        String::from_utf8(e)
            .unwrap()
            .replace("rejection", "commit")
            .into_bytes()
    });
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("entry 2"), "{}", stderr(&o));
    tamper(&store_path, "log_entries", 2, |_| before);
    assert_eq!(verify(&key_a, false).status.code(), Some(0));

    // A stored hash changed offline (the node over entries 0 and 1, stored hash 2).
    tamper(&store_path, "log_hashes", 2, |mut h| {
        h[0] ^= 1;
        h
    });
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("stored hash 2"), "{}", stderr(&o));

    std::fs::remove_file(&store_path).unwrap();
    assert_eq!(
        verify(&key_a, false).status.code(),
        Some(2),
        "a missing store is a configuration error"
    );
}
