"""Command line: ``python -m training run|validate|schema``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training",
        description="Distributed training on Ray Train from a job spec (YAML or JSON).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_run = sub.add_parser("run", help="validate and run a job spec; print and write the result JSON")
    p_run.add_argument("spec", help="job spec file (.yaml/.yml/.json)")
    p_run.add_argument("--output", "-o", help="result JSON path (default: <storage>/<name>/result.json)")
    p_run.add_argument("--name", help="run name instead of the spec's (a new name starts afresh; the same name resumes)")
    p_run.add_argument("--resume", action="store_true",
                       help="mode tune: continue the interrupted experiment of this name (finished trials are kept)")
    p_run.add_argument("--num-samples", type=int, metavar="N", help="mode tune: tuneConfig.numSamples for this run")
    p_run.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                       help="override a spec field before validation (dotted path, YAML value), e.g. "
                            "--set config.numWorkers=1; repeatable")

    p_val = sub.add_parser("validate", help="validate job spec(s) without starting Ray")
    p_val.add_argument("specs", nargs="+")

    p_schema = sub.add_parser("schema", help="print a JSON schema")
    p_schema.add_argument("which", choices=["spec", "result"])

    args = parser.parse_args(argv)

    if args.command == "run":
        from training.runner import run

        code, _, _ = run(args.spec, args.output, name=args.name, resume=args.resume, sets=args.sets,
                         num_samples=args.num_samples)
        return code

    if args.command == "validate":
        from training.errors import SpecError
        from training.job.build import load_job

        bad = 0
        for path in args.specs:
            try:
                job = load_job(path)
            except SpecError as exc:
                bad += 1
                print(f"{path}: INVALID: {exc.message}", file=sys.stderr)
                if exc.details and "\n" in exc.details:
                    print("  " + exc.details.replace("\n", "\n  "), file=sys.stderr)
            else:
                print(f"{path}: ok (mode={job.mode}, name={job.name})")
        return 2 if bad else 0

    from training.job.load import JOB_SPEC_SCHEMA, RESULT_SCHEMA

    path = JOB_SPEC_SCHEMA if args.which == "spec" else RESULT_SCHEMA
    print(json.dumps(json.loads(path.read_text()), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
