"""The rendered diff: semantic comparison of two trees, grouped output, and base refs rendered in a worktree."""
import shutil
import subprocess

import pytest

from generator import diff
from tests.support import REPO, run_generator


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def two_trees(tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    # unchanged, but keys in another order and a comment: not a difference
    write(base, "eks/ray-cluster/raycluster-a.yaml", "kind: RayCluster\nmetadata: {name: a}\nspec: {x: 1, y: 2}\n")
    write(head, "eks/ray-cluster/raycluster-a.yaml", "# comment\nspec: {y: 2, x: 1}\nmetadata: {name: a}\nkind: RayCluster\n")
    # changed
    write(base, "eks/job-one/rayjob-one.yaml", "kind: RayJob\nmetadata: {name: one}\nspec: {entrypoint: a}\n")
    write(head, "eks/job-one/rayjob-one.yaml", "kind: RayJob\nmetadata: {name: one}\nspec: {entrypoint: b}\n")
    # removed and added
    write(base, "eks/job-old/rayjob-old.yaml", "kind: RayJob\nmetadata: {name: old}\n")
    write(head, "minikube/job-new/rayjob-new.yaml", "kind: RayJob\nmetadata: {name: new}\n")
    write(head, "minikube/job-new/configmap-new-spec.yaml", "kind: ConfigMap\nmetadata: {name: new-spec}\n")
    return base, head


def test_compare_classifies_and_ignores_key_order(two_trees):
    changes = diff.compare(*two_trees)
    got = {(c.env, c.app, c.resource, c.status) for c in changes}
    assert got == {
        ("eks", "job-one", "rayjob-one.yaml", "changed"),
        ("eks", "job-old", "rayjob-old.yaml", "removed"),
        ("minikube", "job-new", "rayjob-new.yaml", "added"),
        ("minikube", "job-new", "configmap-new-spec.yaml", "added"),
    }
    assert diff.summary(changes, ["eks", "minikube"]) == {
        "eks": {"added": 0, "changed": 1, "removed": 1},
        "minikube": {"added": 2, "changed": 0, "removed": 0},
    }
    changed = next(c for c in changes if c.status == "changed")
    assert "-  entrypoint: a\n" in changed.diff and "+  entrypoint: b\n" in changed.diff


def test_markdown_groups_env_app_resource(two_trees):
    md = diff.format_markdown(diff.compare(*two_trees), ["eks", "minikube"], "origin/main")
    assert "| eks | 0 | 1 | 1 |" in md and "| minikube | 2 | 0 | 0 |" in md
    assert md.index("#### eks") < md.index("**job-one**") < md.index("#### minikube") < md.index("**job-new**")
    assert "```diff" in md and "<details>" in md


def test_text_format_for_terminals(two_trees):
    text = diff.format_text(diff.compare(*two_trees), ["eks", "minikube"], "HEAD~1")
    assert "eks" in text and "changed: rayjob-one.yaml" in text and "```" not in text


@pytest.fixture
def git_repo(tmp_path):
    """A git repository holding this project's generator (and schema_messages, which it imports), versions.yaml, charts, environments and (committed) apps/."""
    root = tmp_path / "gitrepo"
    root.mkdir()
    for name in ("generator", "schema_messages", "charts", "environments", "apps", "argocd", "health-checks"):
        shutil.copytree(REPO / name, root / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "versions.yaml", root / "versions.yaml")  # the generator reads the pinned versions
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "add", "-A")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    return root


def test_diff_against_a_base_ref_after_an_environment_change(git_repo):
    env = git_repo / "environments" / "minikube.yaml"
    env.write_text(env.read_text().replace("sizeLimit: 1Gi", "sizeLimit: 2Gi"))
    proc = run_generator(git_repo, "diff", "--base", "HEAD", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    # the standing cluster changed; the job is a new run (new hash): its RayJob, spec and NetworkPolicy are paired,
    # not added + removed
    assert "| minikube | 0 | 4 | 0 |" in proc.stdout
    assert "| eks | 0 | 0 | 0 |" in proc.stdout
    assert "(a new run)" in proc.stdout
    assert "-              sizeLimit: 1Gi" in proc.stdout and "+              sizeLimit: 2Gi" in proc.stdout


def test_diff_renders_the_base_even_when_its_apps_were_stale(git_repo):
    # the base commit's apps/ is hand-edited (stale); the diff must compare fresh renders, so: no change
    target = next((git_repo / "apps" / "eks").rglob("raycluster-*.yaml"))
    target.write_text(target.read_text().replace("ray-training", "hand-edited"))
    subprocess.run(["git", "-C", str(git_repo), "-c", "user.email=t@e.com", "-c", "user.name=t", "commit", "-qam",
                    "stale"], check=True)
    proc = run_generator(git_repo, "diff", "--base", "HEAD", "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "No rendered change." in proc.stdout


def test_unknown_base_ref_is_a_clear_error(git_repo):
    proc = run_generator(git_repo, "diff", "--base", "no-such-ref")
    assert proc.returncode == 1
    assert "cannot check out base ref 'no-such-ref'" in proc.stderr


def _many_changes(count: int, lines: int) -> list:
    return [diff.Change("eks", f"job-{i:03d}", f"RayJob-job-{i:03d}.yaml", "changed",
                        ["--- a\n", "+++ b\n", "@@ -1 +1 @@\n", *[f"-  image: old-{i}-{n}\n" for n in range(lines)],
                         *[f"+  image: new-{i}-{n}\n" for n in range(lines)]]) for i in range(count)]


def test_a_comment_over_the_limit_shows_whole_resources_and_lists_the_rest():
    changes = _many_changes(60, 200)  # ≈ 60 x 5.5 kB: far over one comment
    full = diff.format_markdown(changes, ["eks"], "origin/main")
    assert len(full) > 300_000
    md = diff.format_markdown(changes, ["eks"], "origin/main", max_chars=diff.COMMENT_LIMIT)
    assert len(md) <= diff.COMMENT_LIMIT
    assert "| eks | 0 | 60 | 0 |" in md  # the summary is always there
    shown = [c for c in changes if f"<code>{c.resource}</code>" in md]
    hidden = [c for c in changes if c not in shown]
    assert shown and hidden and shown == changes[:len(shown)]
    for c in shown:  # each shown resource whole: its every line, inside a closed fence
        assert all(line.rstrip("\n") in md for line in c.diff)
    assert md.count("```diff") == len(shown) and md.count("```") == 2 * len(shown)
    assert md.count("<details>") == md.count("</details>") == len(shown)
    assert f"**{len(hidden)} more resource(s) not shown**" in md and "make diff BASE=origin/main" in md
    assert f"`eks/{hidden[0].app}/{hidden[0].resource}` (changed)" in md
    assert md.endswith("\n") and full.startswith(md.split("\n\n**")[0][:2000])


def test_a_comment_under_the_limit_is_the_whole_diff():
    changes = _many_changes(3, 5)
    assert diff.format_markdown(changes, ["eks"], "origin/main", max_chars=diff.COMMENT_LIMIT) == \
        diff.format_markdown(changes, ["eks"], "origin/main")


def test_the_list_of_what_was_left_out_is_cut_with_a_count_not_mid_name():
    changes = _many_changes(5000, 1)
    md = diff.format_markdown(changes, ["eks"], "origin/main", max_chars=diff.COMMENT_LIMIT)
    assert len(md) <= diff.COMMENT_LIMIT
    last = md.rstrip("\n").splitlines()[-1]
    assert last.startswith("- … and ") and last.endswith(" more"), last
    listed = md.split("more resource(s) not shown**", 1)[1].splitlines()[2:]
    assert listed and all(line.startswith("- `eks/job-") and line.endswith(".yaml` (changed)") for line in listed[:-1])


def test_an_app_rendered_per_cluster_is_in_the_diff(tmp_path):
    """An environment on several clusters renders some apps under apps/<env>/clusters/<cluster>/: the PR diff shows
    them too, named by that path."""
    base, head = tmp_path / "base", tmp_path / "head"
    for root, subnet in ((base, "subnet-a"), (head, "subnet-b")):
        write(root, "eks/clusters/west-b/platform/storageclass-fsx.yaml",
              f"kind: StorageClass\nmetadata: {{name: fsx}}\nparameters: {{subnetId: {subnet}}}\n")
        write(root, "eks/job-one/rayjob-one.yaml", "kind: RayJob\nmetadata: {name: one}\n")
    changes = diff.compare(base, head)
    assert [(c.env, c.app, c.resource, c.status) for c in changes] == [
        ("eks", "clusters/west-b/platform", "storageclass-fsx.yaml", "changed")]
