"""Day two, from the repository: the cluster side.

`python -m ops bootstrap | status | logs | diagnose | retry | watch` reads `environments/` (through the
generator's loader: the same composition, never a render of its own) and talks to the environments' clusters and to
Argo CD with the Kubernetes client. A change to what runs is always a git change: `retry` edits an environment
file, re-renders with the generator and commits; Argo CD does the rest.

Exit codes (every command): 0 done / healthy; 1 the job or environment is not (failed, degraded, not synced);
2 bad input (unknown environment, job or context; a job name that matches two kinds); 3 a cluster or Argo CD
cannot be reached; 4 timed out waiting.
"""
