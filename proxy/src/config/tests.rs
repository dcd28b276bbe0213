use super::*;
use std::time::Duration;

#[test]
fn minimal_config_gets_spec_defaults() {
    let c = Config::parse("[upstream]\nurl = \"http://127.0.0.1:8081\"\n", "t.toml").unwrap();
    assert_eq!(c.listen.addr, "0.0.0.0:8080");
    assert_eq!(c.admin.addr, "127.0.0.1:9901");
    assert_eq!(c.listen.drain_timeout, Duration::from_secs(20));
    assert_eq!(c.limits.max_body, 1 << 20);
    assert_eq!(c.limits.max_response, 8 << 20);
    assert_eq!(c.limits.max_json_depth, 128);
    assert_eq!(c.limits.header_timeout, Duration::from_secs(10));
    assert_eq!(c.upstream.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.upstream.timeout, Duration::from_secs(30));
    assert_eq!(c.writes.len(), 4);
    assert_eq!(c.unbound_writes, UnboundWrites::Deny);
    assert_eq!(c.drift_sinks, vec![Sink::Stdout]);
    assert!(c.pre_image_fetch && c.authority && c.watch);
    assert!(c.mcp_path.is_none());
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"
        bogus_top = 1
        [listen]
        addr = "nonsense"
        drain_timout = "5s"
        [upstream]
        timeout = "soon"
        [limits]
        max_body = "1 parsec"
        [ptcl]
        pre_image = "maybe"
        [drift]
        sinks = ["stderr"]
    "#;
    let err = Config::parse(text, "bad.toml").unwrap_err();
    let keys: Vec<&str> = err.0.iter().map(|p| p.key.as_str()).collect();
    for want in [
        "listen.drain_timout",
        "bogus_top",
        "listen.addr",
        "upstream.url",
        "upstream.timeout",
        "limits.max_body",
        "ptcl.pre_image",
        "drift.sinks",
    ] {
        assert!(keys.contains(&want), "{want} missing from {keys:?}");
    }
    assert!(err.0.iter().all(|p| p.file == "bad.toml"));
    assert!(err
        .to_string()
        .contains("bad.toml: listen.drain_timout: unknown key"));
}

#[test]
fn sizes_parse_with_binary_and_decimal_units() {
    assert_eq!(parse_size("1MiB"), Some(1 << 20));
    assert_eq!(parse_size("512KiB"), Some(512 << 10));
    assert_eq!(parse_size("10MB"), Some(10_000_000));
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("MiB"), None);
    assert_eq!(parse_size("99999999999999GiB"), None);
}

#[test]
fn full_spec_example_is_accepted() {
    let text = r#"
[listen]
addr = "0.0.0.0:8080"
drain_timeout = "20s"
tls = { cert = "/etc/palisade/tls.crt", key = "/etc/palisade/tls.key", client_ca = "/etc/palisade/ca.crt" }
public_base = "https://erp.example.com"
[admin]
addr = "127.0.0.1:9901"
[upstream]
url = "http://127.0.0.1:8081"
connect_timeout = "2s"
timeout = "30s"
tls = { ca = "/ca.pem", identity = "spiffe://cluster.local/ns/erp/sa/erp" }
shadow_url = "http://127.0.0.1:8082"
[limits]
max_body = "1MiB"
max_response = "8MiB"
max_json_depth = 128
header_timeout = "10s"
max_connections = 10000
[store]
kind = "embedded"
path = "/var/lib/palisade/state.redb"
[signing]
key = "/etc/palisade/signing.pem"
[receipts]
origin = "erp.example.com/palisade"
witness_interval = "10s"
[trust]
issuers = "/etc/palisade/issuers.json"
[ptcl]
writes = ["POST", "PUT", "PATCH", "DELETE"]
max_clock_skew = "60s"
pre_image = "fetch"
max_grant = "5m"
authority = true
[rich]
lockfile = "/etc/palisade/lock.json"
contracts = "/etc/palisade/contracts"
unbound_writes = "deny"
watch = true
[mcp]
path = "/mcp"
[drift]
sinks = ["stdout", { file = "/var/log/palisade/drift.jsonl" }, { webhook = "http://collector:9000/events" }]
quarantine_dir = "/var/lib/palisade/quarantine"
"#;
    let c = Config::parse(text, "spec.toml").unwrap();
    assert_eq!(c.receipts.origin, "erp.example.com/palisade");
    assert_eq!(c.mcp_path.as_deref(), Some("/mcp"));
    assert_eq!(c.drift_sinks.len(), 3);
    assert!(c.listen.tls.unwrap().client_ca.is_some());
    assert_eq!(
        c.upstream.identity.as_deref(),
        Some("spiffe://cluster.local/ns/erp/sa/erp")
    );
}

#[test]
fn retention_and_access_log_have_defaults_and_refuse_nonsense() {
    let base = "[upstream]\nurl = \"http://127.0.0.1:8081\"\n";
    let c = Config::parse(base, "t.toml").unwrap();
    assert_eq!(c.store.retention, Retention::default());
    assert_eq!(c.store.retention.leases, Duration::from_secs(86_400));
    assert_eq!(
        c.store.retention.receipts,
        Some(Duration::from_secs(30 * 86_400))
    );
    assert_eq!(c.access_log, AccessLog::Full);
    let c = Config::parse(
        &format!("{base}[store]\nreceipt_retention = \"forever\"\nlease_retention = \"1h\"\n[log]\naccess = \"sampled\"\naccess_sample_rate = 0.25\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.store.retention.receipts, None);
    assert_eq!(c.store.retention.leases, Duration::from_secs(3600));
    assert_eq!(c.access_log, AccessLog::Sampled { every: 4 });
    let c = Config::parse(&format!("{base}[log]\naccess = \"off\"\n"), "t.toml").unwrap();
    assert_eq!(c.access_log, AccessLog::Off);
    for (bad, key) in [
        (
            "[store]\nreceipt_retention = \"5m\"\n",
            "store.receipt_retention",
        ),
        (
            "[store]\nreceipt_retention = \"a while\"\n",
            "store.receipt_retention",
        ),
        (
            "[store]\nlease_retention = \"-1s\"\n",
            "store.lease_retention",
        ),
        ("[store]\nretention = \"1d\"\n", "store.retention"),
        ("[log]\naccess = \"some\"\n", "log.access"),
        (
            "[log]\naccess = \"sampled\"\naccess_sample_rate = 0.0\n",
            "log.access_sample_rate",
        ),
        (
            "[log]\naccess = \"sampled\"\naccess_sample_rate = 2.0\n",
            "log.access_sample_rate",
        ),
        (
            "[log]\naccess_sample_rate = 0.5\n",
            "log.access_sample_rate",
        ),
        ("[log]\nformat = \"json\"\n", "log.format"),
    ] {
        let err = Config::parse(&format!("{base}{bad}"), "t.toml").unwrap_err();
        assert!(
            err.0.iter().any(|p| p.key == key),
            "{bad:?}: {key} not in {err}"
        );
    }
}

#[test]
fn aip2_defaults_and_problems() {
    let base = "[upstream]\nurl = \"http://127.0.0.1:8081\"\n";
    let ok = format!(
        "{base}[aip2]\nkernels = {{ 84532 = \"0x9d25A874f046185d9237Cd4954C88D2B74B0021b\" }}\n\
         trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1\"]\n"
    );
    let c = Config::parse(&ok, "t.toml").unwrap();
    let a = c.aip2.unwrap();
    assert_eq!(a.quote_channel, "/quote-channel");
    assert_eq!(a.rate_limit, 60);
    assert_eq!(a.grace, Duration::from_secs(30));
    assert_eq!(a.dedup_ttl, Duration::from_secs(25 * 3600));
    assert_eq!(a.kernels.len(), 1);
    assert_eq!(a.trusted_proxies.len(), 2);
    assert_eq!(
        a.trusted_proxy_header,
        crate::config::ProxyHeader::XForwardedFor
    );
    assert!(a.relay);
    assert_eq!(a.relay_ttl, Duration::from_secs(24 * 3600));
    assert_eq!((a.relay_max_per_tx, a.relay_max_messages), (50, 100_000));
    assert!(Config::parse(base, "t.toml").unwrap().aip2.is_none());
    let fwd = format!("{ok}trusted_proxy_header = \"Forwarded\"\n");
    let a = Config::parse(&fwd, "t.toml").unwrap().aip2.unwrap();
    assert_eq!(
        a.trusted_proxy_header,
        crate::config::ProxyHeader::Forwarded
    );

    // `[aip2]` stands alone: no PTCL enforcement needed (issue 37).
    let alone = format!("{base}[ptcl]\nwrites = []\n[aip2]\nkernels = {{ 84532 = \"0x9d25A874f046185d9237Cd4954C88D2B74B0021b\" }}\n");
    let c = Config::parse(&alone, "t.toml").unwrap();
    assert!(!c.enforcing() && c.needs_store() && c.aip2.is_some());
    let bad = format!(
        "{base}[ptcl]\nwrites = []\n[aip2]\nquote_channel = \"q/\"\nkernels = {{ x = \"0x1\", 1 = \"nope\" }}\n\
         rate_limit = 0\ntrusted_proxies = [\"10.0.0.0/33\"]\ntrusted_proxy_header = \"x-real-ip\"\nrelay_max_per_tx = 0\nrelay_ttl = \"x\"\ndedup_ttl = \"1h\"\nsurprise = 1\n"
    );
    let err = Config::parse(&bad, "t.toml").unwrap_err();
    let keys: Vec<&str> = err.0.iter().map(|p| p.key.as_str()).collect();
    for k in [
        "aip2.quote_channel",
        "aip2.kernels",
        "aip2.kernels.1",
        "aip2.rate_limit",
        "aip2.trusted_proxies",
        "aip2.trusted_proxy_header",
        "aip2.relay_max_per_tx",
        "aip2.relay_ttl",
        "aip2.dedup_ttl",
        "aip2.surprise",
    ] {
        assert!(keys.contains(&k), "{k} not reported: {keys:?}");
    }
}

/// `[receipts]` (SPEC §2): the log's origin (by default `<public_base host>/palisade`) and its
/// witnesses, whose verifier keys must be of type 0x04 with a key ID that matches.
#[test]
fn receipts_origin_and_witnesses() {
    use base64::Engine as _;
    let base = "[upstream]\nurl = \"http://127.0.0.1:8081\"\n";
    assert_eq!(
        Config::parse(base, "t.toml").unwrap().receipts.origin,
        "palisade"
    );
    let with_base = format!("[listen]\npublic_base = \"https://erp.example.com\"\n{base}");
    let c = Config::parse(&with_base, "t.toml").unwrap();
    assert_eq!(c.receipts.origin, "erp.example.com/palisade");
    assert!(c.receipts.witnesses.is_empty());
    assert_eq!(
        c.receipts.witness_interval,
        std::time::Duration::from_secs(10)
    );

    let mut typed = vec![0x04];
    typed.extend_from_slice(&[9u8; 32]);
    use sha2::Digest as _;
    let digest = sha2::Sha256::new()
        .chain_update(b"witness.example\n")
        .chain_update(&typed)
        .finalize();
    let id = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&typed);
    let vkey = format!("witness.example+{id:08x}+{b64}");
    let good = format!(
        "{base}[receipts]\nwitnesses = [{{ url = \"https://witness.example/\", vkey = \"{vkey}\" }}]\n"
    );
    let c = Config::parse(&good, "t.toml").unwrap();
    assert_eq!(c.receipts.witnesses[0].key.name, "witness.example");

    let bad = format!(
        "{base}[receipts]\norigin = \"two words\"\nwitness_interval = \"100ms\"\nsurprise = 1\n\
         witnesses = [{{ url = \"ftp://w\", vkey = \"{vkey}\" }}, {{ url = \"https://w/\", vkey = \"{}\" }}, {{ url = \"https://w/\" }}]\n",
        vkey.replacen("witness.example+", "other.example+", 1)
    );
    let err = Config::parse(&bad, "t.toml").unwrap_err();
    let keys: Vec<&str> = err.0.iter().map(|p| p.key.as_str()).collect();
    for k in [
        "receipts.origin",
        "receipts.witness_interval",
        "receipts.surprise",
        "receipts.witnesses[0].url",
        "receipts.witnesses[1].vkey",
        "receipts.witnesses[2].vkey",
    ] {
        assert!(keys.contains(&k), "{k} not reported: {keys:?}");
    }
}

#[test]
fn telemetry_otlp_defaults_and_problems() {
    let base = "[upstream]\nurl = \"http://127.0.0.1:8081\"\n";
    assert!(Config::parse(base, "t.toml").unwrap().otlp.is_none());
    let good = format!(
        "{base}[telemetry]\notlp = {{ endpoint = \"https://collector.example:4318/otlp/\", headers = {{ x-api-key = \"test-key-not-a-secret\" }} }}\n"
    );
    let o = Config::parse(&good, "t.toml").unwrap().otlp.unwrap();
    assert_eq!(o.endpoint, "https://collector.example:4318/otlp");
    assert_eq!(o.sample, 1.0);
    assert_eq!(o.timeout, std::time::Duration::from_secs(5));
    assert!(!o.receipts);
    assert_eq!(o.headers.len(), 1);
    // The header's value is never shown.
    assert!(!format!("{o:?}").contains("test-key-not-a-secret"));

    let bad = format!(
        "{base}[telemetry]\nsurprise = 1\notlp = {{ endpoint = \"collector:4318\", sample = 1.5, timeout = \"0s\", headers = {{ \"bad name\" = \"v\", ok = \"line\\nbreak\" }}, extra = true }}\n"
    );
    let err = Config::parse(&bad, "t.toml").unwrap_err();
    let keys: Vec<&str> = err.0.iter().map(|p| p.key.as_str()).collect();
    for k in [
        "telemetry.surprise",
        "telemetry.otlp.extra",
        "telemetry.otlp.endpoint",
        "telemetry.otlp.sample",
        "telemetry.otlp.timeout",
        "telemetry.otlp.headers.bad name",
        "telemetry.otlp.headers.ok",
    ] {
        assert!(keys.contains(&k), "{k} not reported: {keys:?}");
    }
    assert!(!err.to_string().contains("line\nbreak"));
    let missing = format!("{base}[telemetry]\notlp = {{ sample = 0.5 }}\n");
    let err = Config::parse(&missing, "t.toml").unwrap_err();
    assert_eq!(err.0[0].key, "telemetry.otlp.endpoint");
}
