"""Helpers shared by every test folder (imported by name; the conftest.py files hold only fixtures and hooks)."""
from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# libyaml's scanner (PyYAML's C loader, the one generator/manifests.py and validation/ read with): the same safe
# constructors as yaml.safe_load at about a tenth of the time. The fast lane parsed YAML for 27 of its 110 s with
# the pure-Python one (cProfile, 2026-11-29).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text_or_stream):
    """yaml.safe_load, through libyaml."""
    return yaml.load(text_or_stream, Loader=YAML_LOADER)


def load_yaml_all(text_or_stream) -> list:
    """yaml.safe_load_all, through libyaml (a list: the documents are read at once)."""
    return list(yaml.load_all(text_or_stream, Loader=YAML_LOADER))


def run_generator_process(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    """`python -m generator --root <root> <args>` in a new interpreter, exactly as a person runs it."""
    environ = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "generator", "--root", str(root), *args], cwd=REPO,
                          capture_output=True, text=True, env=environ)


def run_generator(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    """The generator's command line in a process of its own, forked from this one with the generator imported.

    What the child does is `python -m generator`'s: `generator.cli.main` with these arguments, its own stdout and
    stderr, its own exit code (an uncaught exception prints its traceback and exits 1, as Python does), in the
    repository's folder with `env` added. What it saves is a new interpreter and its imports, about 95 ms a call
    over the fast lane's hundred calls (docs/benchmarks.md, "The fast lane"). The generator's caches are emptied in
    the child, so nothing read by an earlier call in this process is reused; helm's output is reused within a run
    for the same inputs (`_remember_helm_output`). Two things a fork shares with its parent are left to
    `run_generator_process`: the string-hash seed (the determinism tests compare renders made by separate
    interpreters) and the `-m generator` entry point itself.
    """
    if not hasattr(os, "fork"):
        return run_generator_process(root, *args, env=env)
    import generator.cli  # noqa: F401  (imported here, in the parent, once: the children inherit it)

    argv = ["--root", str(root), *args]
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _generator_child(argv, env or {}, (out_read, err_read), (out_write, err_write))
    os.close(out_write)
    os.close(err_write)
    stderr: list = []
    reader = threading.Thread(target=lambda: stderr.append(_read_all(err_read)))
    reader.start()
    stdout = _read_all(out_read)
    reader.join()
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess([sys.executable, "-m", "generator", *argv], os.waitstatus_to_exitcode(status),
                                       stdout, stderr[0])


def _read_all(fd: int) -> str:
    with os.fdopen(fd, "rb") as stream:
        return stream.read().decode()


def _generator_child(argv: list, env: dict, parent_ends: tuple, child_ends: tuple) -> None:
    code = 1
    try:
        gc.disable()  # a short life: no collection touching (and copying) the parent's pages
        for fd in parent_ends:
            os.close(fd)
        os.dup2(child_ends[0], 1)
        os.dup2(child_ends[1], 2)
        for fd in child_ends:
            os.close(fd)
        sys.stdin = open(os.devnull)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        os.environ.update(env)
        os.chdir(REPO)
        _clear_generator_caches()
        _remember_helm_output()
        from generator import cli

        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's usage errors, as the interpreter would turn them into a code
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


HELM_MEMO_VARIABLE = "RAY_GITOPS_TESTS_HELM_MEMO"


def _remember_helm_output() -> None:
    """Within one test run (the folder $RAY_GITOPS_TESTS_HELM_MEMO, made by tests/conftest.py), `helm template` is
    called once for each input and its output reused for the same input: the same helm binary, release, namespace,
    Kubernetes version, values, HELM_* settings, and chart files byte for byte (the library chart's included). A
    failure is never kept, so a broken chart or value always meets the real helm. The tests that are about helm's
    output itself (two renders give identical bytes, the committed apps equal a fresh render) run
    `run_generator_process`, which never reuses anything."""
    folder = os.environ.get(HELM_MEMO_VARIABLE)
    if not folder:
        return
    from generator import helm

    real, digests = helm.template, {}

    def template(root, release, chart_dir, namespace, kube_version, values, what):
        binary = Path(helm.binary())
        chart = Path(chart_dir).resolve()
        if chart not in digests:
            digests[chart] = _folder_digest(chart)
        stat = binary.stat()
        key = hashlib.sha256(json.dumps([str(binary), stat.st_size, stat.st_mtime_ns, release, namespace,
                                         kube_version, values, digests[chart],
                                         sorted((k, v) for k, v in os.environ.items() if k.startswith("HELM_"))],
                                        sort_keys=True).encode()).hexdigest()
        kept = Path(folder) / key
        if kept.is_file():
            return helm.Result(kept.read_text(), 0.0)
        result = real(root, release, chart_dir, namespace, kube_version, values, what)
        partial = kept.with_name(f"{key}.{os.getpid()}")
        partial.write_text(result.stdout)
        os.replace(partial, kept)
        return result

    helm.template = template


def _folder_digest(folder: Path) -> str:
    """sha256 over every file's relative path and bytes under `folder`, following symbolic links."""
    digest = hashlib.sha256()
    for parent, _, files in sorted(os.walk(folder, followlinks=True)):
        for name in sorted(files):
            path = Path(parent) / name
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _clear_generator_caches() -> None:
    """Empty every functools cache of the generator's modules (and the schema messages they use)."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("generator", "schema_messages"):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def tree_digest(path: Path) -> dict:
    """{relative path: sha256} of every file under `path` (an absent tree is {})."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def built_binary(component: str, binary: str, what: str):
    """A binary of an e2e component, built from its pinned module by e2e.components (cached after the first build);
    a build that fails fails the test that needs it."""
    import pytest

    from e2e import components
    try:
        paths = components.build([component], out=sys.stderr)
    except components.BuildError as exc:
        pytest.fail(f"cannot build {what} from its module (Go >= 1.26 and the module proxy are needed): {exc}")
    return paths[binary]


def go_module_dir(module: str, version: str) -> Path:
    """An upstream Go module's source, read in place from Go's module cache (`go mod download`: from the module
    proxy the first time); the test that needs it fails with Go's message when it cannot be had."""
    import json

    import pytest
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True)
    info = json.loads(proc.stdout or "{}") if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or not info.get("Dir"):
        pytest.fail(f"go mod download {module}@{version} failed: {info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def app_dir(root: Path, env: str, app: str, cluster: str | None = None) -> Path:
    """Where an app of an environment is rendered for one of its clusters (default: the one keyed like the
    environment): that cluster's own apps/<env>/clusters/<cluster>/<app>/ when there is one, else the shared
    apps/<env>/<app>/ (generator/render.py place)."""
    own = root / "apps" / env / "clusters" / (cluster or env) / app
    return own if own.is_dir() else root / "apps" / env / app
