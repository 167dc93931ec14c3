"""make bump-image: the tag changes, everything else in the files stays byte-for-byte, and apps/ follows."""
import difflib

import pytest

from generator import bump_image
from tests.support import REPO, app_dir, load_yaml, run_generator, tree_digest


def test_round_trip_without_a_change_is_byte_for_byte(tmp_path):
    """The ruamel settings reproduce every environment file exactly (so an edit touches only its line)."""
    import io

    for path in sorted((REPO / "environments").glob("*.yaml")):
        yaml_rt = bump_image.round_trip_yaml()
        out = io.StringIO()
        yaml_rt.dump(yaml_rt.load(path.read_text()), out)
        assert out.getvalue() == path.read_text(), path.name


def test_bump_changes_only_the_tag_lines_and_re_renders(repo_copy):
    before = {p.name: p.read_text() for p in (repo_copy / "environments").glob("*.yaml")}
    proc = run_generator(repo_copy, "bump-image", "--tag", "0.2.0")
    assert proc.returncode == 0, proc.stderr
    assert "environments/base.yaml: cluster.image.tag 0.1.0-cpu -> 0.2.0-cpu" in proc.stdout
    assert "environments/eks.yaml: cluster.image.tag 0.1.0-efa -> 0.2.0-efa" in proc.stdout
    for name, old in before.items():
        new = (repo_copy / "environments" / name).read_text()
        changed = [l for l in difflib.ndiff(old.splitlines(), new.splitlines()) if l[:1] in "+-"]
        if name in ("base.yaml", "eks.yaml"):
            assert len(changed) == 2 and all("tag:" in l for l in changed), changed
            assert '"0.2.0-' in new  # the quoting is kept
        else:
            assert changed == []
    cluster = load_yaml((app_dir(repo_copy, "eks", "ray-cluster") / "raycluster-eks-ray.yaml").read_text())
    image = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("/ray-training:0.2.0-efa")
    # the torchrun job's own image is not the training image: untouched
    (job,) = app_dir(repo_copy, "eks", "job-fsdp-llama").glob("pytorchjob-*.yaml")
    assert "fsdp:2025.06" in job.read_text()


@pytest.mark.parametrize("bad", ["latest", "bad tag", "-x"])
def test_bump_rejects_unpinned_or_malformed_tags(repo_copy, bad):
    before = (repo_copy / "environments" / "base.yaml").read_text()
    proc = run_generator(repo_copy, "bump-image", f"--tag={bad}")
    assert proc.returncode == 1 and "not a pinned image tag" in proc.stderr
    assert (repo_copy / "environments" / "base.yaml").read_text() == before


DIGEST = "sha256:" + "ab" * 32


def test_a_digest_pins_one_environments_image_and_a_new_tag_clears_it(repo_copy):
    proc = run_generator(repo_copy, "bump-image", "--tag", "0.2.0", "--env", "eks", "--digest", DIGEST)
    assert proc.returncode == 0, proc.stderr
    assert f"environments/eks.yaml: cluster.image.tag 0.1.0-efa -> 0.2.0-efa@{DIGEST}" in proc.stdout
    eks = load_yaml((repo_copy / "environments/eks.yaml").read_text())["cluster"]["image"]
    assert (eks["tag"], eks["digest"]) == ("0.2.0-efa", DIGEST)
    cluster = load_yaml((app_dir(repo_copy, "eks", "ray-cluster") / "raycluster-eks-ray.yaml").read_text())
    image = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f"/ray-training:0.2.0-efa@{DIGEST}")
    minikube = load_yaml((repo_copy / "apps/minikube/ray-cluster/raycluster-minikube-ray.yaml").read_text())
    assert "@" not in minikube["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    # a new tag without a digest: the stale digest goes with the old tag
    proc = run_generator(repo_copy, "bump-image", "--tag", "0.3.0")
    assert proc.returncode == 0, proc.stderr
    assert f"environments/eks.yaml: cluster.image.tag 0.2.0-efa@{DIGEST} -> 0.3.0-efa" in proc.stdout
    assert "digest" not in load_yaml((repo_copy / "environments/eks.yaml").read_text())["cluster"]["image"]


@pytest.mark.parametrize("args,message", [
    (["--digest", DIGEST], "give the environment too, ENV=<name>"),
    (["--env", "eks", "--digest", "sha256:xyz"], "is not an image digest"),
    (["--env", "nope"], "unknown environment 'nope'; known environments: eks, minikube"),
    (["--env", "minikube", "--digest", DIGEST], "environments/minikube.yaml sets no cluster.image.tag"),
])
def test_a_bad_digest_or_environment_is_refused_and_nothing_changes(repo_copy, args, message):
    before = tree_digest(repo_copy)
    proc = run_generator(repo_copy, "bump-image", "--tag", "0.2.0", *args)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert tree_digest(repo_copy) == before
