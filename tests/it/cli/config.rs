//! `config check` and `run`: unknown keys, the files a config names, mismatched certificates.

use super::*;

#[test]
fn an_unknown_config_key_fails_check_and_run_with_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[upstream]\nurl = \"http://127.0.0.1:9\"\n[limits]\nmax_bdy = \"1MiB\"\n[ptcl]\npre_image = \"sometimes\"\n",
    )
    .unwrap();
    for args in [["config", "check", "--config"], ["run", "--config", "--"]] {
        let mut a: Vec<&str> = args.iter().copied().filter(|s| *s != "--").collect();
        a.push(cfg.to_str().unwrap());
        let o = palisade(&a, b"");
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let err = stderr(&o);
        assert!(err.contains("limits.max_bdy: unknown key"), "{a:?}: {err}");
        assert!(
            err.contains("ptcl.pre_image"),
            "every problem at once: {err}"
        );
        assert!(err.contains("bad.toml"), "names the file: {err}");
    }
    // PALISADE_CONFIG stands in for --config.
    let o = Command::new(support::bin())
        .args(["config", "check"])
        .env("PALISADE_CONFIG", &cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("limits.max_bdy"));

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[upstream]\nurl = \"http://127.0.0.1:9\"\n").unwrap();
    let o = palisade(
        &["config", "check", "--config", good.to_str().unwrap()],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn config_check_loads_the_files_the_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\ntls = {{ cert = \"{0}/nope.crt\", key = \"{0}/nope.key\" }}\n\
             [admin]\ntls = {{ cert = \"{0}/noadmin.crt\", key = \"{0}/noadmin.key\", client_ca = \"{0}/noca.pem\" }}\n\
             [upstream]\nurl = \"http://127.0.0.1:9\"\n[signing]\nkey = \"{0}/nokey.pem\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let o = palisade(&["config", "check", "--config", cfg.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("listen.tls") && err.contains("nope.crt"),
        "{err}"
    );
    assert!(
        err.contains("signing.key") && err.contains("nokey.pem"),
        "{err}"
    );
    assert!(
        err.contains("admin.tls:") && err.contains("noadmin.crt"),
        "{err}"
    );
    assert!(
        err.contains("admin.tls.client_ca") && err.contains("noca.pem"),
        "{err}"
    );
}

#[test]
fn a_certificate_with_another_certificates_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = support::Pki::new(dir.path());
    let (a, b) = (pki.issue("a", true), pki.issue("b", true));
    std::fs::write(dir.path().join("a.crt"), &a.cert_pem).unwrap();
    std::fs::write(dir.path().join("b.key"), &b.key_pem).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\ntls = {{ cert = \"{0}/a.crt\", key = \"{0}/b.key\" }}\n\
             [upstream]\nurl = \"http://127.0.0.1:9\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    for cmd in [
        &["config", "check", "--config"][..],
        &["run", "--config"][..],
    ] {
        let mut args = cmd.to_vec();
        args.push(cfg.to_str().unwrap());
        let o = palisade(&args, b"");
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("b.key") && err.contains("does not match the certificate"),
            "{cmd:?}: {err}"
        );
    }
}
