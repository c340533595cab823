"""Command line of the compendium: ``compendium run|list|claims`` (also ``python -m compendium``)."""
from __future__ import annotations

import argparse
import json
import sys

from compendium import claims, profiles, runner


def _parse_param(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"parameters look like NAME=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _profile(text: str) -> str:
    try:
        return profiles.check(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compendium", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)

    p_run = sub.add_parser("run", help="execute notebooks with papermill (default: all of them)")
    p_run.add_argument("names", nargs="*", help="notebook names (e.g. 00_tour, accpp/01_ioi, or a unique part)")
    p_run.add_argument("--profile", type=_profile, default=profiles.DEFAULT, help=f"one of {', '.join(profiles.PROFILES)}")
    p_run.add_argument("--seed", type=int, default=0)
    p_run.add_argument("--device", default="cpu", help="cpu or cuda")
    p_run.add_argument("-p", "--param", type=_parse_param, action="append", default=[],
                       help="extra notebook parameter NAME=VALUE (VALUE parsed as JSON when it can be)")
    p_run.add_argument("--output", default=None, help="folder for executed notebooks (default build/notebooks)")
    p_run.add_argument("--keep-going", action="store_true", help="run the rest after a failure")
    p_run.add_argument("--no-claims", action="store_true", help="do not rebuild the claims tables afterwards")
    p_run.add_argument("--publish-figures", action="store_true",
                       help="copy the run's figures into papers/<paper>/figures/ (the main job does)")

    sub.add_parser("list", help="list the notebooks")
    sub.add_parser("claims", help="rebuild papers/*/CLAIMS.md from the recorded values")

    args = parser.parse_args(argv)
    if args.cmd == "list":
        for name in runner.list_notebooks():
            print(name)
        return 0
    if args.cmd == "claims":
        for path in claims.write_tables():
            print(f"wrote {path}")
        return 0

    try:
        names = [runner.resolve(n) for n in args.names]
    except ValueError as err:
        parser.error(str(err))
    from pathlib import Path

    print(f"running {len(names) or len(runner.list_notebooks())} notebook(s) at profile '{args.profile}', "
          f"seed {args.seed}, device {args.device}")
    done, failed = runner.run_many(
        names or None, keep_going=args.keep_going, profile=args.profile, seed=args.seed, device=args.device,
        parameters=dict(args.param), output_dir=Path(args.output) if args.output else None,
    )
    if args.publish_figures:
        from compendium import plotting

        copied = plotting.publish(claims.paper_ids())
        print(f"copied {len(copied)} figure(s) into papers/<paper>/figures/")
    if not args.no_claims:
        for path in claims.write_tables():
            print(f"wrote {path}")
    print(f"{len(done)} notebook(s) ran, {len(failed)} failed")
    for err in failed:
        print(f"  {err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
