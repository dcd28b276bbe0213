"""The Helm chart (deploy/helm/palisade) and the manifests rendered from it (deploy/kubernetes),
checked with Helm's own engine (helm-python-sdk: Helm v4's Go SDK), the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), and our own conventions; the config each shape's
ConfigMap carries must pass `palisade config check`, its bundle `palisade lock check`.

Run by tests/it/kubernetes.rs with PALISADE_BIN set; prints one line per check and exits 1 on the
first failure. `--write` regenerates deploy/kubernetes/*.yaml from the chart instead.
"""

import json
import tomllib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/helm/palisade"
RENDERED = ROOT / "deploy/kubernetes"
KUBE = "1.33.0"  # a current release; native sidecars need ≥ 1.29
SHAPES = ["embedded", "postgres"]
# Kinds whose schemas kubernetes-validate does not carry (CRDs), and what we check instead.
CRDS = {
    ("cert-manager.io/v1", "Certificate"): ["secretName", "issuerRef", "dnsNames"],
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["selector", "endpoints"],
    ("monitoring.coreos.com/v1", "PrometheusRule"): ["groups"],
}


def fail(msg):
    print(f"FAIL {msg}")
    sys.exit(1)


def ok(msg):
    print(f"ok   {msg}")


def values(shape):
    return helm.values_from_yaml((CHART / "ci" / f"{shape}-values.yaml").read_text())


def render(vals):
    out = helm.Chart.load(str(CHART)).render(vals, name="erp", namespace="erp")
    docs = []
    for path in sorted(out):
        for doc in yaml.safe_load_all(out[path]):
            if doc:
                docs.append(doc)
    return docs


def manifest_text(docs):
    return "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def validate(docs, where):
    for d in docs:
        key = (d["apiVersion"], d["kind"])
        if key in CRDS:
            missing = [f for f in CRDS[key] if f not in d.get("spec", {})]
            if missing or not d.get("metadata", {}).get("name"):
                fail(f"{where}: {d['kind']} lacks {missing}")
            continue
        try:
            kubernetes_validate.validate(d, KUBE, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail(f"{where}: {d['kind']} {d['metadata']['name']}: {e.message} at {list(e.path)}")
    ok(f"{where}: {len(docs)} objects valid against Kubernetes {KUBE} (strict)")


def pod_of(docs, shape):
    kind = "StatefulSet" if shape == "embedded" else "Deployment"
    workloads = by_kind(docs, "StatefulSet") + by_kind(docs, "Deployment")
    if [w["kind"] for w in workloads] != [kind]:
        fail(f"{shape}: workloads {[w['kind'] for w in workloads]}, want one {kind}")
    return workloads[0]


def toml_of(docs):
    cms = [d for d in by_kind(docs, "ConfigMap") if "palisade.toml" in d.get("data", {})]
    if len(cms) != 1:
        fail("one ConfigMap carries palisade.toml")
    return cms[0]["data"]["palisade.toml"]


def seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    if not m:
        fail(f"not a duration: {text}")
    n, unit = int(m.group(1)), m.group(2)
    return n / 1000 if unit == "ms" else n * {"s": 1, "m": 60, "h": 3600}[unit]


def conventions(docs, shape):
    import tomllib

    work = pod_of(docs, shape)
    spec = work["spec"]["template"]["spec"]
    config = tomllib.loads(toml_of(docs))
    inits, mains = spec.get("initContainers", []), spec["containers"]
    sidecars = [c for c in inits if c["name"] == "palisade"]
    if len(sidecars) != 1 or sidecars[0].get("restartPolicy") != "Always":
        fail(f"{shape}: palisade must be a native sidecar (initContainers, restartPolicy Always)")
    if any(c["name"] == "palisade" for c in mains):
        fail(f"{shape}: palisade is also a regular container")
    side = sidecars[0]
    ports = {p["name"]: p["containerPort"] for p in side["ports"]}
    admin_port = int(config["admin"]["addr"].rsplit(":", 1)[1])
    data_port = int(config["listen"]["addr"].rsplit(":", 1)[1])
    if ports != {"http": data_port, "admin": admin_port}:
        fail(f"{shape}: container ports {ports} differ from the config's {data_port}/{admin_port}")
    credential = "token_file" in config["admin"] or config["admin"].get("allowed_spiffe_ids")
    if not config["admin"]["addr"].startswith("0.0.0.0:") or not credential:
        fail(f"{shape}: the admin listener must bind the pod IP with a credential (probes come from the kubelet)")
    scheme = "HTTPS" if "tls" in config["admin"] else "HTTP"
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"]:
        probe = side.get(kind, {}).get("httpGet")
        if not probe or probe["port"] not in ("admin", admin_port):
            fail(f"{shape}: {kind} must be an httpGet on the admin port")
        if probe.get("scheme", "HTTP") != scheme:
            fail(f"{shape}: {kind} must use {scheme}, as the admin listener does")
        if probe["path"] not in ("/healthz", "/readyz"):
            fail(f"{shape}: {kind} path {probe['path']} is not an admin probe path")
    if side["readinessProbe"]["httpGet"]["path"] != "/readyz":
        fail(f"{shape}: readiness must follow /readyz (503 while draining or when the store is gone)")
    # Restricted pod security.
    psc = spec["securityContext"]
    if not psc.get("runAsNonRoot") or psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        fail(f"{shape}: pod securityContext must be non-root with seccomp RuntimeDefault")
    for c in inits + mains:
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("capabilities", {}).get("drop") != ["ALL"]:
            fail(f"{shape}: container {c['name']} must drop ALL capabilities and forbid escalation")
    if side["securityContext"].get("readOnlyRootFilesystem") is not True:
        fail(f"{shape}: the sidecar's root filesystem must be read-only")
    for what in ["requests", "limits"]:
        if "memory" not in side["resources"].get(what, {}):
            fail(f"{shape}: the sidecar needs a memory {what[:-1]}")
    drain = seconds(config["listen"]["drain_timeout"])
    grace = spec["terminationGracePeriodSeconds"]
    if not grace > drain:
        fail(f"{shape}: terminationGracePeriodSeconds {grace} must exceed drain_timeout {drain}")
    # Every file the config names is under a mount of the sidecar, and every mount has a volume.
    mounts = {m["mountPath"]: m["name"] for m in side["volumeMounts"]}
    volumes = {v["name"] for v in spec["volumes"]}
    claims = {t["metadata"]["name"] for t in work["spec"].get("volumeClaimTemplates", [])}
    for name in mounts.values():
        if name not in volumes | claims:
            fail(f"{shape}: mount {name} has no volume")
    paths = [config["signing"]["key"], config["trust"]["issuers"]]
    paths += [config["admin"]["token_file"]] if "token_file" in config["admin"] else []
    paths += list(config["admin"].get("tls", {}).values())
    paths += [v for k, v in config.get("rich", {}).items() if k in ("lockfile", "contracts")]
    paths += list(config["listen"].get("tls", {}).values())
    if config["store"]["kind"] == "embedded":
        paths.append(config["store"]["path"])
    for p in paths:
        if not any(p.startswith(m.rstrip("/") + "/") for m in mounts):
            fail(f"{shape}: {p} is not under any mount of the sidecar")
    # The shapes.
    if shape == "embedded":
        if work["spec"]["replicas"] != 1 or "state" not in claims:
            fail("embedded: one replica with a volumeClaimTemplate named state")
        if any("persistentVolumeClaim" in v for v in spec["volumes"]):
            fail("embedded: no shared PVC; the StatefulSet's claim template holds the store")
    else:
        env = {e["name"]: e for e in side.get("env", [])}
        url = env.get("PALISADE_STORE_URL", {}).get("valueFrom", {}).get("secretKeyRef")
        if config["store"].get("url_env") != "PALISADE_STORE_URL" or not url or "url" in config["store"]:
            fail("postgres: the database URL comes from a Secret through store.url_env, never the ConfigMap")
        if work["spec"]["replicas"] < 2:
            fail("postgres: the CI values run several replicas")
    # The Service reaches only the sidecar.
    for svc in by_kind(docs, "Service"):
        for p in svc["spec"]["ports"]:
            if p["targetPort"] not in ("http", "admin"):
                fail(f"{shape}: Service {svc['metadata']['name']} targets {p['targetPort']}")
    data_svcs = [s for s in by_kind(docs, "Service") if "component" not in str(s["metadata"].get("labels"))]
    if [p["targetPort"] for s in data_svcs for p in s["spec"]["ports"]] != ["http"]:
        fail(f"{shape}: the client Service must target the sidecar's http port only")
    for np in by_kind(docs, "NetworkPolicy"):
        allowed = {p["port"] for rule in np["spec"]["ingress"] for p in rule["ports"]}
        if allowed != {"http", "admin"}:
            fail(f"{shape}: NetworkPolicy admits {allowed}")
    if not by_kind(docs, "NetworkPolicy"):
        fail(f"{shape}: no NetworkPolicy")
    ok(f"{shape}: native sidecar, probes on the admin port, restricted security, grace {grace}s > drain {drain:.0f}s, mounts, Service and NetworkPolicy")
    return config


def config_check(config_text, config, shape, palisade):
    """The ConfigMap's palisade.toml, its absolute paths moved into a temp dir holding real
    files (keys from `palisade keygen`, the example bundle, a TLS pair), passes `config check`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import datetime

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        text = config_text.replace("/etc/palisade/", f"{tmp}/etc/").replace("/var/lib/palisade/", f"{tmp}/var/")
        for d in ["etc/signing", "etc/trust", "etc/admin", "etc/admin-tls", "etc/tls", "etc/bundle", "var"]:
            (root / d).mkdir(parents=True, exist_ok=True)
        subprocess.run([palisade, "keygen", "--out", str(root / "etc/signing/signing.pem")], check=True, capture_output=True)
        agent = subprocess.run([palisade, "keygen", "--out", str(root / "agent.pem")], check=True, capture_output=True, text=True)
        (root / "etc/trust/issuers.json").write_text(f"[{agent.stdout.strip()}]")
        (root / "etc/admin/token").write_text("t0ken-for-the-check\n")
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "erp-palisade.erp.svc")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("erp-palisade.erp.svc")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        pem = cert.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        for d in ["etc/tls", "etc/admin-tls"]:
            (root / d / "tls.crt").write_bytes(pem)
            (root / d / "ca.crt").write_bytes(pem)
            (root / d / "tls.key").write_bytes(key_pem)
        if "lockfile" in config.get("rich", {}):
            # The bundle as the ConfigMap's items project it: lock.json and contracts/<key>.
            (root / "etc/bundle/contracts").mkdir()
            (root / "etc/bundle/lock.json").write_bytes((ROOT / "examples/erp/lock.json").read_bytes())
            for key_name in values(shape)["bundle"]["contracts"]:
                src = ROOT / "examples/erp/contracts" / key_name
                (root / "etc/bundle/contracts" / key_name).write_bytes(src.read_bytes())
        path = root / "palisade.toml"
        path.write_text(text)
        env = dict(os.environ, PALISADE_STORE_URL="postgresql://palisade@db/palisade?sslmode=verify-full&sslrootcert=system")
        r = subprocess.run([palisade, "config", "check", "--config", str(path)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            fail(f"{shape}: palisade config check: {r.stderr.strip()}")
    ok(f"{shape}: the ConfigMap's palisade.toml passes `palisade config check`")


def dashboard(docs, shape):
    """The Grafana dashboard's ConfigMap: labelled for kube-prometheus-stack's Grafana sidecar,
    the chart's dashboards/palisade.json as it is, valid JSON, and every metric its queries
    name listed in the metrics reference (the book test ties that list to the code;
    tests/it/dashboard.rs scrapes a sidecar for them)."""
    import re

    maps = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    if shape != "embedded":
        if maps:
            fail(f"{shape}: the dashboard is off by default, yet rendered")
        return
    if len(maps) != 1:
        fail(f"{shape}: one dashboard ConfigMap expected, found {len(maps)}")
    cm = maps[0]
    if cm["metadata"]["labels"].get("grafana_dashboard") != "1":
        fail(f"{shape}: the dashboard lacks the grafana_dashboard: \"1\" label the Grafana sidecar looks for")
    if cm["metadata"].get("annotations", {}).get("grafana_folder") != "Palisade":
        fail(f"{shape}: the dashboard's folder annotation was not rendered")
    board = json.loads(cm["data"]["palisade.json"])
    if board != json.loads((CHART / "dashboards/palisade.json").read_text()):
        fail(f"{shape}: the rendered dashboard differs from dashboards/palisade.json")
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    if len(board["panels"]) < 10 or not all(exprs):
        fail(f"{shape}: the dashboard's panels or queries are missing")
    names = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"\bpalisade_[a-z_]+", e)}
    reference = (ROOT / "docs/reference/metrics.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in reference)
    if missing:
        fail(f"the dashboard queries metrics the sidecar does not export: {missing}")
    ok(f"{shape}: the Grafana dashboard ({len(board['panels'])} panels, {len(names)} metrics, each exported)")


def mcp_front(palisade):
    """In front of an MCP server: `mcpPath` and `mcpAllowedOrigins` become `[mcp]` with
    `allowed_origins` (SPEC §11), and the config passes `palisade config check`."""
    vals = values("embedded")
    vals.setdefault("palisade", {}).update(
        {"mcpPath": "/mcp", "mcpAllowedOrigins": ["https://app.example", "http://localhost:6274"]})
    docs = render(vals)
    text = toml_of(docs)
    mcp = tomllib.loads(text).get("mcp", {})
    if mcp != {"path": "/mcp", "allowed_origins": ["https://app.example", "http://localhost:6274"]}:
        fail(f"mcpPath/mcpAllowedOrigins render as [mcp] {mcp}")
    config_check(text, tomllib.loads(text), "embedded", palisade)
    ok("mcpPath and mcpAllowedOrigins render [mcp] path and allowed_origins, which pass `palisade config check`")


def otlp_export(palisade):
    """`telemetry.otlp` renders `[telemetry] otlp` (SPEC §16), which passes `palisade config
    check`; no endpoint renders none."""
    vals = values("embedded")
    if "telemetry" in tomllib.loads(toml_of(render(vals))):
        fail("no telemetry.otlp.endpoint, yet [telemetry] is rendered")
    vals["telemetry"] = {"otlp": {"endpoint": "http://otel-collector.monitoring:4318", "sample": 0.25, "receipts": True}}
    text = toml_of(render(vals))
    otlp = tomllib.loads(text).get("telemetry", {}).get("otlp")
    want = {"endpoint": "http://otel-collector.monitoring:4318", "sample": 0.25, "timeout": "5s", "receipts": True}
    if otlp != want:
        fail(f"telemetry.otlp renders as {otlp}, not {want}")
    config_check(text, tomllib.loads(text), "embedded", palisade)
    ok("telemetry.otlp renders [telemetry] otlp, which passes `palisade config check`")


def refusals():
    """Values the schema or the templates must refuse, with a message naming the fault."""
    cases = [
        ({"store": {"kind": "redis"}}, "kind"),
        ({"store": {"kind": "postgres", "postgres": {"urlSecret": {"name": ""}}}}, "name"),
        ({"replicas": 0}, "replicas"),
        ({"admin": {"tokenSecret": ""}}, "tokenSecret"),
        ({"admin": {"tokenSecret": "", "mtls": {"enabled": True, "secretName": "svid", "allowedSpiffeIds": ["not-a-spiffe-id"]}}}, "allowedSpiffeIds"),
        ({"palisade": {"ptcl": {"preImage": "sometimes"}}}, "preImage"),
        ({"palisade": {"drainTimeout": "20s"}}, "drainTimeout"),
        ({"bundle": {"contracts": ["contracts/x.json"]}}, "contracts"),
        ({"tls": {"enabled": True}}, "tls.secretName"),
        ({"palisade": {"mcpPath": "/mcp", "mcpAllowedOrigins": ["https://app.example/path"]}}, "mcpAllowedOrigins"),
        ({"telemetry": {"otlp": {"endpoint": "collector:4318"}}}, "endpoint"),
        ({"telemetry": {"otlp": {"endpoint": "http://c:4318", "sample": 2}}}, "sample"),
    ]
    chart = helm.Chart.load(str(CHART))
    for vals, word in cases:
        try:
            chart.render(vals, name="erp", namespace="erp")
        except Exception as e:  # HelmValuesError or HelmRenderError
            if word not in str(e):
                fail(f"values {vals} refused, but the message does not name {word}: {e}")
            continue
        fail(f"values {vals} were accepted")
    ok(f"{len(cases)} bad values refused by the schema or the templates, each naming its field")


def main():
    if "--pod" in sys.argv:
        # For the pod run in tests/it/kubernetes.rs: the workload's pod spec and the config.
        shape = sys.argv[sys.argv.index("--pod") + 1]
        docs = render(values(shape))
        work = pod_of(docs, shape)
        print(json.dumps({"kind": work["kind"], "pod": work["spec"]["template"]["spec"], "config": toml_of(docs)}))
        return
    if "--write" in sys.argv:
        RENDERED.mkdir(exist_ok=True)
        for shape in SHAPES:
            head = f"# Rendered from deploy/helm/palisade with ci/{shape}-values.yaml (release erp, namespace erp)\n# by `python tests/k8s/check_chart.py --write`; tests/it/kubernetes.rs checks it is current.\n"
            (RENDERED / f"{shape}.yaml").write_text(head + manifest_text(render(values(shape))))
        return
    palisade = os.environ["PALISADE_BIN"]
    report = helm.lint(str(CHART), strict=True, kube_version=f"v{KUBE}")
    errors = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    if errors:
        fail(f"helm lint: {errors}")
    ok(f"helm lint (strict, Helm {helm.helm_sdk_version()}) of the chart")
    for shape in SHAPES:
        report = helm.lint(str(CHART), values(shape), strict=True, kube_version=f"v{KUBE}")
        if [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]:
            fail(f"helm lint {shape}: {report}")
        docs = render(values(shape))
        validate(docs, f"{shape} render")
        config = conventions(docs, shape)
        dashboard(docs, shape)
        config_check(toml_of(docs), config, shape, palisade)
        committed = RENDERED / f"{shape}.yaml"
        text = committed.read_text()
        if text.split("\n", 2)[2] != manifest_text(docs):
            fail(f"{committed} is not the chart's current render: run python tests/k8s/check_chart.py --write")
        validate([d for d in yaml.safe_load_all(text) if d], f"{committed.relative_to(ROOT)}")
    lock = subprocess.run(
        [palisade, "lock", "check", "--lockfile", str(ROOT / "examples/erp/lock.json"), "--contracts", str(ROOT / "examples/erp/contracts")],
        capture_output=True, text=True,
    )
    if lock.returncode != 0:
        fail(f"palisade lock check of the example bundle: {lock.stderr}")
    keys = sorted(values("embedded")["bundle"]["contracts"])
    files = sorted(p.name for p in (ROOT / "examples/erp/contracts").glob("*.json"))
    if keys != files:
        fail(f"ci/embedded-values.yaml lists {keys}, the bundle has {files}")
    ok("the bundle the embedded shape mounts passes `palisade lock check`, every contract projected")
    mcp_front(palisade)
    otlp_export(palisade)
    refusals()
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
