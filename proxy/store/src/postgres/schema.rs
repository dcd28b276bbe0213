//! The schema and its migrations, applied at start (SPEC §10: "replicas starting together
//! agree on one schema migration"). Versions are rows of `palisade_schema`; a database whose
//! version is newer than this build knows is refused rather than written to.

use deadpool_postgres::tokio_postgres::Client;

use crate::StoreError;

use super::tx::unavailable;

/// Each migration, in order; index + 1 is its version.
const MIGRATIONS: &[&str] = &[
    // 1: what the embedded store keeps, as tables (docs/postgres-store.md).
    "CREATE TABLE fences (resource text PRIMARY KEY, epoch bigint NOT NULL);
     CREATE TABLE lease_data (lease_id text NOT NULL, part \"char\" NOT NULL, seq bigint NOT NULL,
                              value bytea NOT NULL, PRIMARY KEY (lease_id, part, seq));
     CREATE TABLE receipts (seq bigint PRIMARY KEY, jcs bytea NOT NULL);
     CREATE TABLE chain_head (id smallint PRIMARY KEY CHECK (id = 1), next_seq bigint NOT NULL,
                              head text NOT NULL);
     CREATE TABLE idempotency (key text PRIMARY KEY, record bytea NOT NULL, expires_ms bigint NOT NULL);
     CREATE TABLE escrows (id text PRIMARY KEY, record bytea NOT NULL);",
    // 2: idempotency reservations (a row with its owner), what the sweeps need (expiry
    // indexes, the append time of receipts, the chain's anchor once receipts are removed).
    "ALTER TABLE idempotency ADD COLUMN owner text;
     CREATE INDEX idempotency_expiry ON idempotency (expires_ms);
     CREATE TABLE lease_expiry (lease_id text PRIMARY KEY, expires_ms bigint NOT NULL);
     CREATE INDEX lease_expiry_at ON lease_expiry (expires_ms);
     ALTER TABLE receipts ADD COLUMN at_ms bigint;
     UPDATE receipts SET at_ms = (extract(epoch FROM now()) * 1000)::bigint;
     ALTER TABLE receipts ALTER COLUMN at_ms SET NOT NULL;
     CREATE TABLE chain_anchor (id smallint PRIMARY KEY CHECK (id = 1), pruned bigint NOT NULL,
                                prev text NOT NULL);",
    // 3: the AIP-2.1 negotiation relay (seed 001 §6.3; `store/postgres/relay.rs`).
    "CREATE TABLE relay_messages (pos bigint PRIMARY KEY, tx_id text NOT NULL,
                                  signature text NOT NULL UNIQUE, record bytea NOT NULL,
                                  expires_ms bigint NOT NULL);
     CREATE INDEX relay_messages_tx ON relay_messages (tx_id, pos);
     CREATE INDEX relay_messages_expiry ON relay_messages (expires_ms);
     CREATE TABLE relay_parties (address bytea NOT NULL,
                                 pos bigint NOT NULL REFERENCES relay_messages ON DELETE CASCADE,
                                 chain bigint NOT NULL, PRIMARY KEY (address, pos));
     CREATE INDEX relay_parties_pos ON relay_parties (pos);
     CREATE TABLE relay_head (id smallint PRIMARY KEY CHECK (id = 1), next bigint NOT NULL,
                              kept bigint NOT NULL);
     INSERT INTO relay_head (id, next, kept) VALUES (1, 1, 0);",
    // 4: escrows go with their lease's data (the lease's expiry; the sweeper removes them
    // `store.lease_retention` after it).
    "ALTER TABLE escrows ADD COLUMN expires_ms bigint;
     CREATE INDEX escrows_expiry ON escrows (expires_ms);",
    // 5: RCNS contracts, attempts, PROPOSE outcomes (seed 000; `store/postgres/rcns.rs`).
    "CREATE TABLE rcns_records (kind smallint NOT NULL, key text NOT NULL, owner text NOT NULL,
                                record bytea NOT NULL, expires_ms bigint NOT NULL,
                                PRIMARY KEY (kind, key));
     CREATE INDEX rcns_records_owner ON rcns_records (kind, owner, key);
     CREATE INDEX rcns_records_expiry ON rcns_records (expires_ms);",
    // 6: the receipt log (SPEC §5.5): entries by index (with their append time, for
    // retention), the stored hashes (Go tlog's layout, kept for ever), and the head (size and
    // newest checkpoint) that every replica's batch takes `FOR UPDATE`, so that replicas
    // integrate in turn. An empty `note`: nothing was integrated yet. The v1 chain's tables
    // (`receipts`, `chain_head`, `chain_anchor`) keep what was written before; nothing is added.
    "CREATE TABLE log_entries (idx bigint PRIMARY KEY, entry bytea NOT NULL, at_ms bigint NOT NULL);
     CREATE INDEX log_entries_at ON log_entries (at_ms);
     CREATE TABLE log_hashes (idx bigint PRIMARY KEY, hash bytea NOT NULL);
     CREATE TABLE log_head (id smallint PRIMARY KEY CHECK (id = 1), size bigint NOT NULL,
                            note text NOT NULL);
     INSERT INTO log_head (id, size, note) VALUES (1, 0, '');",
    // 7: the operators' freezes (SPEC §14), each stored with the receipt that made it.
    "CREATE TABLE freezes (id text PRIMARY KEY, record bytea NOT NULL);",
    // 8: write budgets (SPEC §14): a row per spend, a row per key to lock (and to sweep when
    // unused for a day), and the check and spend as one function: one round trip a write. Each statement of a PL/pgSQL
    // function takes a new snapshot (READ COMMITTED), so the count after the lock sees every
    // spend committed by whoever held it: the count is exact across replicas.
    "CREATE TABLE budget_keys (key bytea PRIMARY KEY, last_ms bigint NOT NULL);
     CREATE INDEX budget_keys_last ON budget_keys (last_ms);
     CREATE TABLE budget_spends (id bigserial PRIMARY KEY, key bytea NOT NULL, at_ms bigint NOT NULL);
     CREATE INDEX budget_spends_key ON budget_spends (key, at_ms);
     CREATE INDEX budget_spends_at ON budget_spends (at_ms);
     CREATE FUNCTION palisade_budget_spend(keys bytea[], limits bigint[], windows bigint[],
         now_ms bigint, OUT over int, OUT retry_ms bigint, OUT ids bigint[])
     LANGUAGE plpgsql AS $$
     DECLARE i int; n bigint; leaving bigint;
     BEGIN
       over := 0; retry_ms := 0; ids := '{}';
       -- Upserted in key order, each row locked by its update until this call commits.
       INSERT INTO budget_keys (key, last_ms) SELECT DISTINCT k, now_ms FROM unnest(keys) AS k
         ORDER BY 1 ON CONFLICT (key) DO UPDATE SET last_ms = EXCLUDED.last_ms;
       FOR i IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
         DELETE FROM budget_spends WHERE key = keys[i] AND at_ms <= now_ms - windows[i];
         SELECT count(*) INTO n FROM budget_spends WHERE key = keys[i];
         IF n >= limits[i] THEN
           SELECT at_ms INTO leaving FROM budget_spends WHERE key = keys[i]
             ORDER BY at_ms, id OFFSET greatest(n - limits[i], 0) LIMIT 1;
           over := i;
           retry_ms := greatest(coalesce(leaving, now_ms) + windows[i] - now_ms, 1);
           RETURN;
         END IF;
       END LOOP;
       WITH ins AS (INSERT INTO budget_spends (key, at_ms) SELECT k, now_ms FROM unnest(keys) AS k
                    RETURNING id)
       SELECT coalesce(array_agg(id), '{}') INTO ids FROM ins;
     END $$;",
];

/// The advisory lock key that serialises migrations across replicas ("palisade" in ASCII).
const MIGRATION_LOCK: i64 = 0x7061_6c69_7361_6465;

/// The database's schema version, if this build can use it as it is.
pub(super) async fn check(client: &Client) -> Result<i32, StoreError> {
    // Two statements: a missing table fails the parse of any statement that names it.
    let exists: bool = client
        .query_one("SELECT to_regclass('palisade_schema') IS NOT NULL", &[])
        .await
        .map_err(unavailable)?
        .get(0);
    let current: i32 = if exists {
        client
            .query_one("SELECT coalesce(max(version), 0) FROM palisade_schema", &[])
            .await
            .map_err(unavailable)?
            .get(0)
    } else {
        0
    };
    let known = MIGRATIONS.len() as i32;
    match current {
        v if v == known => Ok(v),
        v if v > known => Err(StoreError::Unavailable(format!(
            "the database's schema is version {v}, newer than this build's {known}: upgrade palisade first"
        ))),
        v => Err(StoreError::Unavailable(format!(
            "the database's schema is version {v}, this build needs {known}: run `palisade store migrate` (or start a sidecar, which migrates)"
        ))),
    }
}

/// Brings the schema up to this build's version; `Err` if the database is newer.
pub(super) async fn migrate(client: &mut Client, empty_head: &str) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    // Held to the end of this transaction: a replica starting at the same time waits here,
    // then finds the migration done.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(unavailable)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS palisade_schema (version int PRIMARY KEY)")
        .await
        .map_err(unavailable)?;
    let row = tx
        .query_one("SELECT coalesce(max(version), 0) FROM palisade_schema", &[])
        .await
        .map_err(unavailable)?;
    let current: i32 = row.get(0);
    let known = MIGRATIONS.len() as i32;
    if current > known {
        return Err(StoreError::Unavailable(format!(
            "the database's schema is version {current}, newer than this build's {known}: upgrade palisade first"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.batch_execute(sql).await.map_err(unavailable)?;
        tx.execute(
            "INSERT INTO palisade_schema (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )
        .await
        .map_err(unavailable)?;
    }
    tx.execute(
        "INSERT INTO chain_head (id, next_seq, head) VALUES (1, 0, $1) ON CONFLICT (id) DO NOTHING",
        &[&empty_head],
    )
    .await
    .map_err(unavailable)?;
    tx.commit().await.map_err(unavailable)
}
