#!/usr/bin/env bash
# Validates deploy/kubernetes offline, without a cluster:
#  - every manifest against the Kubernetes API schemas with kubernetes-validate (PyPI), strict
#    (an unknown field is an error), for Kubernetes 1.28 and the newest it knows. Its CLI
#    only warns on a kind it has no schema for, so it is driven from Python here: an unknown
#    kind is an error, except the prometheus-operator's ServiceMonitor, a CRD, which is checked
#    against the fields of its schema that the manifest uses;
#  - the fleet config embedded in the ConfigMap parses as TOML (tomllib);
#  - the pieces fit: Service selectors match pod labels, named ports exist, the config's listen
#    ports are the container ports, every dns:// endpoint is a headless Service, the grace
#    period outlasts preStop plus shutdown_grace, the user and binary are the Dockerfile's, the
#    security settings are all there, kustomization.yaml lists every manifest, and the
#    client-keys component's patch applies;
#  - with kubectl on PATH, `kubectl kustomize` builds the base and an overlay using the
#    component, and what it renders validates too.
# Usage: scripts/check-kubernetes.sh [DIR]   (from the repository root; default
# deploy/kubernetes). Exits 1 on any error.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-deploy/kubernetes}"

if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    kubernetes-validate
fi

rendered=""
cleanup() { if [ -n "$rendered" ]; then rm -rf "$rendered"; fi; }
trap cleanup EXIT
if command -v kubectl >/dev/null; then
  rendered="$(mktemp -d)"
  abs="$(cd "$dir" && pwd)"
  kubectl kustomize "$abs" >"$rendered/base.yaml"
  mkdir "$rendered/overlay"
  # Kustomize wants relative paths to other kustomizations.
  rel="$(realpath --relative-to="$rendered/overlay" "$abs")"
  printf 'resources: [%s]\ncomponents: [%s/components/client-keys]\n' "$rel" "$rel" \
    >"$rendered/overlay/kustomization.yaml"
  kubectl kustomize "$rendered/overlay" >"$rendered/with-client-keys.yaml"
else
  echo "check-kubernetes: kubectl not on PATH, kustomize builds not checked" >&2
fi

python3 - "$dir" "$rendered" <<'PY'
import pathlib
import re
import sys
import tomllib

import jsonschema
import yaml
import kubernetes_validate.utils as kv

root = pathlib.Path(sys.argv[1])
rendered = pathlib.Path(sys.argv[2]) if sys.argv[2] else None
VERSIONS = ["1.28.0", kv.latest_version()]
errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


# The ServiceMonitor fields this repository uses, typed as in the prometheus-operator CRD
# (monitoring.coreos.com_servicemonitors.yaml); unknown fields are refused, as strict does.
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                    },
                },
                "namespaceSelector": {"type": "object"},
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": r"^(0|(([0-9]+)(ms|s|m|h))+)$"},
                            "scrapeTimeout": {"type": "string", "pattern": r"^(0|(([0-9]+)(ms|s|m|h))+)$"},
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR}
NOT_RESOURCES = {"Kustomization", "Component"}


def validate(doc, where):
    """Schema checks of one resource; errors go to `errors`."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRDS:
        for e in jsonschema.Draft202012Validator(CRDS[key]).iter_errors(doc):
            err(where, f"{'.'.join(map(str, e.path))}: {e.message}")
        return
    for v in VERSIONS:
        try:
            kv.validate(doc, v, strict=True)
        except kv.ValidationError as e:
            err(where, f"Kubernetes {e.version}: {'.'.join(map(str, e.path))}: {e.message}")
        except kv.SchemaNotFoundError as e:
            err(where, f"unknown kind: {e.message}")
        except kv.VersionNotSupportedError:
            err(where, f"kubernetes-validate does not know Kubernetes {v}")


def load(path):
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d]
    except yaml.YAMLError as e:
        err(path, f"not YAML: {e}")
        return []


# Every manifest, by kind and name, from the base directory and examples/.
files = sorted(p for p in root.rglob("*.yaml") if "components" not in p.relative_to(root).parts)
objs = {}
for path in files:
    for doc in load(path):
        if doc.get("kind") in NOT_RESOURCES:
            continue
        where = f"{path} ({doc.get('kind')}/{doc.get('metadata', {}).get('name')})"
        validate(doc, where)
        objs[(doc.get("kind"), doc.get("metadata", {}).get("name"))] = (doc, path)


def get(kind, name):
    found = objs.get((kind, name))
    if found is None:
        err(root, f"no {kind} named {name}")
        return {}
    return found[0]


# kustomization.yaml lists exactly the base directory's manifests (examples/ stay out).
kust = yaml.safe_load((root / "kustomization.yaml").read_text())
listed = set(kust.get("resources", []))
present = {p.name for p in root.glob("*.yaml") if p.name != "kustomization.yaml"}
for name in sorted(listed - present):
    err(root / "kustomization.yaml", f"lists {name}, which does not exist")
for name in sorted(present - listed):
    err(root / "kustomization.yaml", f"does not list {name}")


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def duration(s, where):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", s)
    if not m:
        err(where, f"cannot read the duration {s!r}")
        return 0
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


dep = get("Deployment", "lingo")
pod = dep.get("spec", {}).get("template", {})
pod_labels = pod.get("metadata", {}).get("labels", {})
spec = pod.get("spec", {})
containers = spec.get("containers", [{}])
c = containers[0]
cports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
where = "Deployment/lingo"

# Security: each setting the guide promises, at pod or container level.
psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
either = lambda k: csc.get(k, psc.get(k))
if either("runAsNonRoot") is not True:
    err(where, "runAsNonRoot is not true")
uid = either("runAsUser")
if not isinstance(uid, int) or uid == 0:
    err(where, "runAsUser must be a number other than 0")
if csc.get("readOnlyRootFilesystem") is not True:
    err(where, "readOnlyRootFilesystem is not true")
if csc.get("allowPrivilegeEscalation") is not False:
    err(where, "allowPrivilegeEscalation is not false")
if csc.get("capabilities", {}).get("drop") != ["ALL"]:
    err(where, "capabilities.drop is not [ALL]")
if (either("seccompProfile") or {}).get("type") != "RuntimeDefault":
    err(where, "seccompProfile is not RuntimeDefault")
res = c.get("resources", {})
for part in ("requests", "limits"):
    for r in ("cpu", "memory"):
        if r not in res.get(part, {}):
            err(where, f"resources.{part}.{r} is missing")

# Quantities: the API schemas take any string, the API server only these.
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
for (kind, name), (doc, _) in objs.items():
    for ct in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        for part, amounts in ct.get("resources", {}).items():
            for r, q in amounts.items():
                if not QUANTITY.match(str(q)):
                    err(f"{kind}/{name}", f"resources.{part}.{r}: {q!r} is not a quantity")

# The image's user and binary, from the Dockerfile.
dockerfile = pathlib.Path("Dockerfile").read_text()
m = re.search(r"--uid (\d+)", dockerfile)
if m and uid != int(m[1]):
    err(where, f"runAsUser {uid} is not the Dockerfile's uid {m[1]}")
m = re.search(r"^COPY --from=\S+ \S+/lingo (\S+)$", dockerfile, re.M)
if m and c.get("command", [None])[0] != m[1]:
    err(where, f"command does not start with the Dockerfile's binary {m[1]}")

# Probes: readiness on the metrics port's /ready, liveness on /live.
for probe, path, port in (("readinessProbe", "/ready", "metrics"), ("livenessProbe", "/live", "http")):
    got = c.get(probe, {}).get("httpGet", {})
    if (got.get("path"), got.get("port")) != (path, port):
        err(where, f"{probe} is not GET {path} on port {port}")
    if got.get("port") not in cports:
        err(where, f"{probe} names a port the container does not have")

# The config: mounted from the ConfigMap, parsed, and agreeing with the pod.
args = " ".join(c.get("args", []))
m = re.search(r"--config[= ](\S+)", args)
config_path = m[1] if m else None
if not config_path:
    err(where, "no --config argument")
fleet = None
for v in spec.get("volumes", []):
    if "configMap" not in v:
        continue
    cm = get("ConfigMap", v["configMap"]["name"])
    mount = next((vm["mountPath"] for vm in c.get("volumeMounts", []) if vm["name"] == v["name"]), None)
    for key, text in cm.get("data", {}).items():
        if not key.endswith(".toml"):
            continue
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            err(f"ConfigMap/{cm['metadata']['name']} {key}", f"not TOML: {e}")
            continue
        if config_path == f"{mount}/{key}":
            fleet = parsed
if config_path and fleet is None:
    err(where, f"--config {config_path} is not a TOML key of a mounted ConfigMap")
if fleet is not None:
    for addr, port in ((fleet.get("listen"), "http"), (fleet.get("metrics", {}).get("listen"), "metrics")):
        if not addr or addr.startswith("127."):
            err("config", f"listen address for {port} is {addr!r}: unreachable from the Service")
        elif port_of(addr) != cports.get(port):
            err("config", f"{addr} is not the container's {port} port {cports.get(port)}")
    grace = duration(fleet.get("timeouts", {}).get("shutdown_grace", "30s"), "config")
    stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    sleep = int(stop[1]) if stop[:1] == ["sleep"] and len(stop) == 2 else 0
    if spec.get("terminationGracePeriodSeconds", 30) <= sleep + grace:
        err(where, f"terminationGracePeriodSeconds is not above preStop {sleep}s + shutdown_grace {grace}s")
    for pool, p in fleet.get("pools", {}).items():
        for e in p.get("endpoints", []):
            m = re.fullmatch(r"dns://([^.:]+)\.([^.:]+)\.svc(?:\.cluster\.local)?:(\d+)", e.get("url", ""))
            if not e.get("url", "").startswith("dns://"):
                continue
            if not m:
                err(f"config pools.{pool}", f"{e['url']} is not dns://SERVICE.NAMESPACE.svc[.cluster.local]:PORT")
                continue
            svc = get("Service", m[1])
            if not svc:
                continue
            if svc.get("spec", {}).get("clusterIP") != "None":
                err(f"Service/{m[1]}", "is not headless (clusterIP: None), so DNS gives one address")
            if m[2] != svc.get("metadata", {}).get("namespace", "default"):
                err(f"config pools.{pool}", f"namespace {m[2]} is not Service/{m[1]}'s")
            if int(m[3]) not in [sp["port"] for sp in svc.get("spec", {}).get("ports", [])]:
                err(f"config pools.{pool}", f"port {m[3]} is not a port of Service/{m[1]}")

# Selectors and names that must meet.
svc = get("Service", "lingo")
if not selects(svc.get("spec", {}).get("selector"), pod_labels):
    err("Service/lingo", "selector does not match the Deployment's pods")
for sp in svc.get("spec", {}).get("ports", []):
    if sp.get("targetPort") not in cports:
        err("Service/lingo", f"targetPort {sp.get('targetPort')} is not a container port name")
    elif sp["port"] != cports[sp["targetPort"]]:
        err("Service/lingo", f"port {sp['port']} differs from container port {cports[sp['targetPort']]}")
if not selects(dep.get("spec", {}).get("selector", {}).get("matchLabels"), pod_labels):
    err(where, "selector does not match its own pod labels")
pdb = get("PodDisruptionBudget", "lingo")
if not selects(pdb.get("spec", {}).get("selector", {}).get("matchLabels"), pod_labels):
    err("PodDisruptionBudget/lingo", "selector does not match the Deployment's pods")
hpa = get("HorizontalPodAutoscaler", "lingo").get("spec", {})
if hpa.get("scaleTargetRef", {}).get("name") != "lingo" or hpa.get("scaleTargetRef", {}).get("kind") != "Deployment":
    err("HorizontalPodAutoscaler/lingo", "does not target Deployment/lingo")
sm = get("ServiceMonitor", "lingo").get("spec", {})
if not selects(sm.get("selector", {}).get("matchLabels"), svc.get("metadata", {}).get("labels", {})):
    err("ServiceMonitor/lingo", "selector does not match Service/lingo's labels")
for ep in sm.get("endpoints", []):
    if ep.get("port") not in [sp.get("name") for sp in svc.get("spec", {}).get("ports", [])]:
        err("ServiceMonitor/lingo", f"port {ep.get('port')} is not a port name of Service/lingo")
if spec.get("serviceAccountName") and ("ServiceAccount", spec["serviceAccountName"]) not in objs:
    err(where, f"no ServiceAccount {spec['serviceAccountName']}")
vllm = objs.get(("Deployment", "vllm-qwen"))
if vllm:
    labels = vllm[0]["spec"]["template"]["metadata"]["labels"]
    if not selects(get("Service", "vllm-qwen").get("spec", {}).get("selector"), labels):
        err("Service/vllm-qwen", "selector does not match the example vLLM pods")

# The client-keys component: its JSON patch applied to the Deployment still validates, and
# adds --auth-keys-file under the Secret's mount.
comp = yaml.safe_load((root / "components/client-keys/kustomization.yaml").read_text())
patched = yaml.safe_load(yaml.safe_dump(dep))
for p in comp.get("patches", []):
    for op in yaml.safe_load(p["patch"]):
        parts = op["path"].strip("/").split("/")
        if op["op"] != "add" or parts[-1] != "-":
            err("components/client-keys", f"only `add .../-` patches are checked here: {op}")
            continue
        node = patched
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node.append(op["value"])
validate(patched, "Deployment/lingo with components/client-keys")
m = re.search(r"--auth-keys-file[= ](\S+)", " ".join(patched["spec"]["template"]["spec"]["containers"][0]["args"]))
keys_mount = next((vm["mountPath"] for vm in c.get("volumeMounts", []) if vm["name"] == "client-keys"), None)
if not m or not keys_mount or not m[1].startswith(keys_mount + "/"):
    err("components/client-keys", "does not add --auth-keys-file under the client-keys mount")

# What kubectl kustomize rendered: the same schemas.
if rendered:
    for name in ("base.yaml", "with-client-keys.yaml"):
        for doc in load(rendered / name):
            validate(doc, f"kubectl kustomize ({name}) {doc.get('kind')}/{doc['metadata'].get('name')}")

if errors:
    print("\n".join(errors), file=sys.stderr)
    sys.exit(1)
built = "kustomize builds valid" if rendered else "kustomize builds not checked (no kubectl)"
print(f"check-kubernetes: {len(objs)} manifests valid for Kubernetes {', '.join(VERSIONS)}; "
      f"config and wiring checked; {built}")
PY
