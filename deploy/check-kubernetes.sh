#!/usr/bin/env bash
# Validates every manifest under deploy/kubernetes/ against the Kubernetes
# JSON schemas, strictly (an unknown field is an error), with no cluster and no
# network: kubernetes-validate bundles the schemas. It is installed into
# .local/kv on first use (the only step that needs the network). Also renders
# the kustomization (when kubectl is installed) and validates the result, and
# checks that the Artemis example carries deploy/artemis/broker.properties as
# it is. `make deploy-check` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${KUBE_VALIDATE_VERSION:-1.37.0}"
kube="${KUBE_VERSION:-1.35.0}"
venv=.local/kv
dir=deploy/kubernetes

if [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" != "$version" ]; then
	echo "installing kubernetes-validate $version into $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$version"
fi

manifests=()
while IFS= read -r f; do manifests+=("$f"); done < <(
	find "$dir" -type f \( -name '*.yaml' -o -name '*.yml' \) ! -name 'kustomization.yaml' | sort)
[ "${#manifests[@]}" -gt 0 ] || { echo "no manifests under $dir" >&2; exit 1; }

status=0
echo "== kubernetes-validate $version, Kubernetes $kube, strict: ${#manifests[@]} files"
"$venv/bin/kubernetes-validate" --strict --quiet -k "$kube" "${manifests[@]}" || status=1

if command -v kubectl >/dev/null; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	rendered="$tmp/kubectl-kustomize-output.yaml"
	echo "== kubectl kustomize $dir"
	if kubectl kustomize "$dir" >"$rendered"; then
		"$venv/bin/kubernetes-validate" --strict --quiet -k "$kube" "$rendered" || status=1
	else
		status=1
	fi
else
	echo "kubectl not installed: the kustomization is not rendered"
fi

echo "== the Artemis example's broker.properties = deploy/artemis/broker.properties"
"$venv/bin/python" - "$dir/artemis.yaml" deploy/artemis/broker.properties <<'PY' || status=1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "artemis-broker-properties")
if cm["data"]["broker.properties"] != open(sys.argv[2]).read():
    sys.exit(f"{sys.argv[1]}: its broker.properties differs from {sys.argv[2]}: copy it again")
PY

[ "$status" = 0 ] && echo "ok: every manifest is valid"
exit "$status"
