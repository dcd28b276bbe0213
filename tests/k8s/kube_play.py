"""The chart's embedded-shape pod, rendered by Helm's engine, as `podman kube play` (4.3) can run
it. Run by tests/it/image.rs; prints one YAML stream: the ConfigMaps, a PersistentVolumeClaim
and the Pod.

    python tests/k8s/kube_play.py INPUT.json [POD.json] > pod.yaml

(POD.json, when named, gets the played Pod as JSON, for the test to read its ports and probes.)

INPUT.json: {"image": "localhost/palisade:it", "public_base": "https://…",
             "secrets": {"<secret name>": {"<key>": "<text>"}}, "drain_seconds": 10}

What podman 4.3 cannot take is changed, each change printed to stderr, nothing else:
  - native sidecars: podman runs every init container to completion before the pod's
    containers ("once" init containers), so the sidecar (an init container with
    restartPolicy Always) becomes the pod's first container, beside the SoR, as in
    Kubernetes before 1.29;
  - Secret volumes: podman 4.3.1's kube play dereferences a nil pointer on any `secret:`
    volume (and does not create secrets from `kind: Secret`), so each Secret is played as a
    ConfigMap of the same name, keys and defaultMode;
  - StatefulSet: podman plays Pods and Deployments only, so the pod template runs as a Pod and
    the volumeClaimTemplate `state` becomes a PersistentVolumeClaim (a podman named volume).
The images are the ones the test built: the sidecar's, and the same image running
`palisade sample-sor` as the SoR (the chart's `sor.image`, `sor.args`).
"""

import copy
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_chart import CHART, render, values  # noqa: E402

ROOT = CHART.parents[2]


def changed(what):
    print(f"kube_play.py: {what}", file=sys.stderr)


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    repo, tag = spec["image"].rsplit(":", 1)
    vals = values("embedded")
    vals["image"] = {"repository": repo, "tag": tag, "pullPolicy": "Never"}
    vals["sor"] = dict(vals.get("sor", {}))
    vals["sor"].update(
        {
            "image": spec["image"],
            "imagePullPolicy": "Never",
            "args": ["sample-sor", "--listen", "127.0.0.1:8081", "--data", "/tmp/inventory.json"],
        }
    )
    vals["tls"] = {"enabled": False}
    vals["metrics"] = {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}
    vals.setdefault("palisade", {})
    vals["palisade"]["publicBase"] = spec["public_base"]
    vals["palisade"]["drainTimeoutSeconds"] = spec.get("drain_seconds", 10)
    docs = render(vals)

    out = []
    for cm in [d for d in docs if d["kind"] == "ConfigMap"]:
        out.append(cm)
    # The bundle's ConfigMap (the chart names it, the user makes it): the example ERP bundle.
    bundle = {"lock.json": (ROOT / "examples/erp/lock.json").read_text()}
    for key in vals["bundle"]["contracts"]:
        bundle[key] = (ROOT / "examples/erp/contracts" / key).read_text()
    out.append(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": vals["bundle"]["configMap"]}, "data": bundle}
    )
    for name, data in spec["secrets"].items():
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
    changed(f"Secrets {sorted(spec['secrets'])} played as ConfigMaps (podman 4.3.1 crashes on secret volumes)")

    [sts] = [d for d in docs if d["kind"] == "StatefulSet"]
    pod_spec = copy.deepcopy(sts["spec"]["template"]["spec"])
    [claim] = sts["spec"]["volumeClaimTemplates"]
    out.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim["metadata"]["name"]},
            "spec": claim["spec"],
        }
    )
    pod_spec["volumes"].append(
        {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    )
    changed("StatefulSet played as its Pod; volumeClaimTemplate 'state' as a PersistentVolumeClaim")
    for v in pod_spec["volumes"]:
        if "secret" in v:
            src = v.pop("secret")
            v["configMap"] = {"name": src["secretName"], **({"defaultMode": src["defaultMode"]} if "defaultMode" in src else {})}
    sidecars = [c for c in pod_spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    if len(sidecars) != 1:
        sys.exit(f"want one native sidecar in the rendered pod, found {len(sidecars)}")
    sidecar = sidecars[0]
    del sidecar["restartPolicy"]
    pod_spec["initContainers"] = [c for c in pod_spec["initContainers"] if c is not sidecar]
    if not pod_spec["initContainers"]:
        del pod_spec["initContainers"]
    pod_spec["containers"].insert(0, sidecar)
    changed("native sidecar (init container, restartPolicy Always) played as the pod's first container")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": sts["metadata"]["name"], "labels": sts["spec"]["template"]["metadata"]["labels"]},
        "spec": pod_spec,
    }
    out.append(pod)
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(json.dumps(pod))
    sys.stdout.write("---\n".join(yaml.safe_dump(d, sort_keys=False) for d in out))


if __name__ == "__main__":
    main()
