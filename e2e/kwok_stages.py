"""kwok's stages for the e2e cluster: what fake nodes and pods do.

Upstream's own stages, read from the kwok module at the pinned version (node-initialize, node heartbeat with a
lease, pod-ready, pod-delete), plus two of ours that end a pod on demand: annotate a running pod with
`e2e.ray-gitops.io/exit-code: "0"` and it Succeeds; any other code and it Fails (reason and message from
`e2e.ray-gitops.io/reason` / `.../message`, e.g. OOMKilled). And one that holds a pod's containers waiting, as a
kubelet does when it cannot pull the image: annotate a pod with `e2e.ray-gitops.io/waiting-reason: ErrImagePull`
(message from `e2e.ray-gitops.io/message`) and it is Pending, not ready, its containers waiting with that reason;
remove the annotation and upstream's pod-ready stage runs it (its selector gains one expression: not while held).
Upstream's pod-complete stage is left out on purpose: it completes every pod a Job owns at once, and the RayJob
submitter is such a pod.
"""
from __future__ import annotations

from pathlib import Path

from .components import BY_NAME, module_dir

NODE_ANNOTATION = "kwok.x-k8s.io/node"
EXIT_CODE = "e2e.ray-gitops.io/exit-code"
REASON = "e2e.ray-gitops.io/reason"
MESSAGE = "e2e.ray-gitops.io/message"
WAITING = "e2e.ray-gitops.io/waiting-reason"

UPSTREAM = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
            "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml")


def kwok_module_dir() -> Path:
    return module_dir(BY_NAME["kwok"])


def _finish_stage(name: str, succeed: bool, job_label: str | None = None, delay_seconds: int = 0) -> str:
    """End a running pod as its annotation says; with `job_label`, end a pod carrying that label and no annotation,
    with exit code 0, `delay_seconds` after it runs (_auto_finish_stage)."""
    operator, phase = ("In", "Succeeded") if succeed else ("NotIn", "Failed")
    default_reason = "Completed" if succeed else "Error"
    if job_label:
        which = f"""    - key: '.metadata.annotations["{EXIT_CODE}"]'
      operator: 'DoesNotExist'
    - key: '.metadata.labels["{job_label}"]'
      operator: 'Exists'
"""
        code, code_line = "0", ""
    else:
        which = f"""    - key: '.metadata.annotations["{EXIT_CODE}"]'
      operator: '{operator}'
      values: ['0']
    - key: '.metadata.annotations["{EXIT_CODE}"]'
      operator: 'Exists'
"""
        code, code_line = "{{ $code }}", f'      {{{{ $code := index $annotations "{EXIT_CODE}" }}}}\n'
    delay = f"  delay:\n    durationMilliseconds: {delay_seconds * 1000}\n" if delay_seconds else ""
    return f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
{which}  weight: 10000
{delay}  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $annotations := or .metadata.annotations dict }}}}
{code_line}      {{{{ $reason := or ( index $annotations "{REASON}" ) "{default_reason}" }}}}
      {{{{ $message := or ( index $annotations "{MESSAGE}" ) "" }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {code}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {{{{ $reason | Quote }}}}
            message: {{{{ $message | Quote }}}}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {phase}
"""


HOLD_STAGE = f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: e2e-pod-waiting
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending', 'Running']
    - key: '.metadata.annotations["{WAITING}"]'
      operator: 'Exists'
    - key: '.status.containerStatuses.[].state.waiting.reason'
      operator: 'DoesNotExist'
  weight: 10000
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $annotations := or .metadata.annotations dict }}}}
      {{{{ $reason := index $annotations "{WAITING}" }}}}
      {{{{ $message := or ( index $annotations "{MESSAGE}" ) "" }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
        reason: ContainersNotReady
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
        reason: ContainersNotReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: {{{{ $reason | Quote }}}}
            message: {{{{ $message | Quote }}}}
      {{{{ end }}}}
      phase: Pending
"""

# pod-ready leaves a held pod alone: appended to its selector's expressions.
NOT_HELD = f"""    - key: '.metadata.annotations["{WAITING}"]'
      operator: 'DoesNotExist'
"""


def _not_held(stage: str) -> str:
    head, sep, tail = stage.partition("  next:\n")
    if not sep or "matchExpressions:" not in head:
        raise ValueError("upstream's pod-ready stage changed shape: no selector before next")
    return head + NOT_HELD + sep + tail


# The job pods of a training run: a RayJob's submitter (a Job's pod) and a PyTorchJob's pods.
JOB_POD_LABELS = ("batch.kubernetes.io/job-name", "training.kubeflow.org/job-name")
AUTO_FINISH_SECONDS = 20


def _auto_finish_stage(label: str, index: int) -> str:
    """A job pod that nobody ends on demand succeeds AUTO_FINISH_SECONDS after it runs: the stand-in for training
    on the e2e clusters whose jobs no scenario drives (the second cluster of an environment of several)."""
    return _finish_stage(f"e2e-job-pod-auto-succeed-{index}", True, job_label=label,
                         delay_seconds=AUTO_FINISH_SECONDS)


def write(path: Path, module_dir: Path | None = None, auto_finish_jobs: bool = False) -> Path:
    """The stages of one kwok; with auto_finish_jobs, job pods also end by themselves (_auto_finish_stage)."""
    stage_dir = (module_dir or kwok_module_dir()) / "kustomize" / "stage"
    docs = [(stage_dir / rel).read_text() for rel in UPSTREAM]
    docs = [_not_held(doc) if rel.endswith("pod-ready.yaml") else doc for rel, doc in zip(UPSTREAM, docs, strict=True)]
    docs += [_finish_stage("e2e-pod-succeed", True), _finish_stage("e2e-pod-fail", False), HOLD_STAGE]
    if auto_finish_jobs:
        docs += [_auto_finish_stage(label, i) for i, label in enumerate(JOB_POD_LABELS)]
    path.write_text("\n---\n".join(doc.strip() + "\n" for doc in docs))
    return path
