"""Local stand-ins for the git and Helm repositories Argo CD reads: this repository as a bare git remote (file://),
and the upstream sources at their pinned tags, served from offline copies:

  https://github.com/ray-project/kuberay.git            <- ../shared/upstream/kuberay-<tag>/ (the repository tree)
  https://ray-project.github.io/kuberay-helm/           <- ../shared/upstream/kuberay-v<version>/helm-chart/<chart>,
                                                           packaged by helm and indexed (index.yaml) over HTTP
  https://github.com/kubeflow/training-operator.git    <- the Go module github.com/kubeflow/training-operator at
  https://github.com/kubeflow/trainer.git                  that tag (its module zip holds manifests/)
  https://github.com/kubernetes-sigs/kueue.git          <- the Go module sigs.k8s.io/kueue at that tag (config/)
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from .components import BY_NAME, go_env

GIT_ENV = {"GIT_AUTHOR_NAME": "e2e", "GIT_AUTHOR_EMAIL": "e2e@ray-gitops.invalid", "GIT_COMMITTER_NAME": "e2e",
           "GIT_COMMITTER_EMAIL": "e2e@ray-gitops.invalid", "GIT_CONFIG_NOSYSTEM": "1"}

KUBERAY_GIT = "https://github.com/ray-project/kuberay.git"
KUBERAY_HELM = "https://ray-project.github.io/kuberay-helm/"
TRAINING_OPERATOR_GITS = ("https://github.com/kubeflow/training-operator.git", "https://github.com/kubeflow/trainer.git")
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
KUEUE_GIT = "https://github.com/kubernetes-sigs/kueue.git"
KUEUE_MODULE = "sigs.k8s.io/kueue"


class SourceError(Exception):
    pass


def git(*args, cwd: Path | None = None, check: bool = True) -> str:
    env = {**os.environ, **GIT_ENV}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SourceError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _tracked_files(root: Path) -> list[str]:
    out = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=root)
    return [f for f in out.split("\0") if f and (root / f).exists()]


def copy_checkout(root: Path, dest: Path) -> Path:
    """The working tree of `root` as git sees it (tracked and untracked files, minus ignored), into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in _tracked_files(root):
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest


def init_remote(bare: Path) -> str:
    bare.parent.mkdir(parents=True, exist_ok=True)
    if not bare.exists():
        git("init", "--bare", "--initial-branch=main", str(bare))
    return f"file://{bare}"


def install_push_webhook(bare: Path, root: Path, log: Path) -> Path:
    """A post-receive hook on the remote that does what Argo CD's git webhook does on a push (`python -m e2e
    refresh`: the ApplicationSets regenerate, the Applications refresh), so a push from any clone (`make retry
    --push`) is seen at once instead of at the next poll of the repository (3 min). The hook waits for the refresh:
    when `git push` returns, Argo CD has been told."""
    import shlex
    import sys
    hook = bare / "hooks" / "post-receive"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\n# e2e: Argo CD's git webhook on a push (e2e/remotes.py install_push_webhook)\n"
                    "unset GIT_DIR GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n"
                    f"cd {shlex.quote(str(root))} && {shlex.quote(sys.executable)} -m e2e refresh "
                    f">>{shlex.quote(str(log))} 2>&1 || echo 'e2e: the push webhook failed, see {log}' >&2\n")
    hook.chmod(0o755)
    return hook


def commit_all(work: Path, message: str) -> str:
    git("add", "-A", cwd=work)
    if git("status", "--porcelain", cwd=work):
        git("commit", "-q", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def push_tree(tree: Path, bare: Path, *, branch: str = "main", tag: str | None = None, message: str) -> str:
    """Commit `tree` (a directory that is not a git repository yet) to `branch` (and `tag`) of `bare`."""
    git("init", "-q", f"--initial-branch={branch}", cwd=tree)
    sha = commit_all(tree, message)
    git("push", "-q", "--force", f"file://{bare}", f"HEAD:refs/heads/{branch}", cwd=tree)
    if tag:
        git("push", "-q", "--force", f"file://{bare}", f"HEAD:refs/tags/{tag}", cwd=tree)
    return sha


@dataclass
class HelmRepo:
    directory: Path
    port: int
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        handler = functools.partial(_QuietHandler, directory=str(self.directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        threading.Thread(target=self.server.serve_forever, name="helm-repo", daemon=True).start()

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the supervisor log stays readable
        pass


def module_dir(module: str, version: str) -> Path:
    """The directory of `module@version` in the Go module cache (downloaded through the module proxy if needed)."""
    proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"],
                          cwd=BY_NAME["training-operator"].directory, env=go_env(), capture_output=True, text=True)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise SourceError(f"no offline copy of {module}@{version}: {info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def upstream_tree(url: str, revision: str, upstream_dir: Path) -> Path:
    """A directory holding the repository tree of `url` at `revision`."""
    if url == KUBERAY_GIT:
        path = upstream_dir / f"kuberay-{revision}"
        if not path.is_dir():
            raise SourceError(f"no offline copy of {url} at {revision} (looked for {path})")
        return path
    if url in TRAINING_OPERATOR_GITS:
        return module_dir(TRAINING_OPERATOR_MODULE, revision)
    if url == KUEUE_GIT:
        return module_dir(KUEUE_MODULE, revision)
    raise SourceError(f"the e2e cluster has no offline copy of {url} (known: {KUBERAY_GIT}, "
                      f"{', '.join(TRAINING_OPERATOR_GITS)}, {KUEUE_GIT}, {KUBERAY_HELM})")


def helm_chart_dir(url: str, chart: str, version: str, upstream_dir: Path) -> Path:
    if url != KUBERAY_HELM:
        raise SourceError(f"the e2e cluster has no offline copy of the Helm repository {url}")
    path = upstream_dir / f"kuberay-v{version.lstrip('v')}" / "helm-chart" / chart
    if not (path / "Chart.yaml").is_file():
        raise SourceError(f"no offline copy of chart {chart} {version} from {url} (looked for {path})")
    return path


def build_sources(sources: list[dict], git_dir: Path, helm_repo: HelmRepo, upstream_dir: Path, helm: str) -> dict:
    """Serve every referenced upstream source offline. Returns {real URL: local URL}."""
    helm_dir = helm_repo.directory
    urls: dict[str, str] = {}
    helm_dir.mkdir(parents=True, exist_ok=True)
    for source in sources:
        url, revision = source["repoURL"], source["targetRevision"]
        if source.get("chart"):
            chart_dir = helm_chart_dir(url, source["chart"], revision, upstream_dir)
            subprocess.run([helm, "package", str(chart_dir), "--destination", str(helm_dir)], check=True,
                           capture_output=True, text=True)
            urls[url] = helm_repo.url
            continue
        name = url.rstrip("/").rsplit("/", 1)[-1]
        bare = git_dir / name
        init_remote(bare)
        tree = git_dir / "trees" / f"{name.removesuffix('.git')}-{revision}"
        if tree.exists():
            shutil.rmtree(tree)
        shutil.copytree(upstream_tree(url, revision, upstream_dir), tree, symlinks=True)
        for path in tree.rglob("*"):  # the module cache is read-only
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
        push_tree(tree, bare, branch=f"release-{revision}", tag=revision, message=f"{url} at {revision}")
        shutil.rmtree(tree)
        urls[url] = f"file://{bare}"
    if helm_repo.url in urls.values():
        subprocess.run([helm, "repo", "index", str(helm_dir), "--url", helm_repo.url], check=True,
                       capture_output=True, text=True)
    return urls
