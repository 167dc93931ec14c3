"""make bump-image: the tag changes, everything else in the files stays byte-for-byte, and apps/ follows."""
import difflib

import pytest
import yaml

from generator import bump_image
from tests.support import REPO, run_generator


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
    cluster = yaml.safe_load((repo_copy / "apps/eks/ray-cluster/raycluster-eks-ray.yaml").read_text())
    image = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith("/ray-training:0.2.0-efa")
    # the torchrun job's own image is not the training image: untouched
    (job,) = (repo_copy / "apps/eks/job-fsdp-llama").glob("pytorchjob-*.yaml")
    assert "fsdp:2025.06" in job.read_text()


@pytest.mark.parametrize("bad", ["latest", "bad tag", "-x"])
def test_bump_rejects_unpinned_or_malformed_tags(repo_copy, bad):
    before = (repo_copy / "environments" / "base.yaml").read_text()
    proc = run_generator(repo_copy, "bump-image", f"--tag={bad}")
    assert proc.returncode == 1 and "not a pinned image tag" in proc.stderr
    assert (repo_copy / "environments" / "base.yaml").read_text() == before
